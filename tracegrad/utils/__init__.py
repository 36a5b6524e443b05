"""tg.utils: data loading (tg.utils.data), as torch.utils."""
from . import data

__all__ = ["data"]
