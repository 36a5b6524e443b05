"""`tg.backends`, as `torch.backends`: which accelerator backends this build has (mps: none)."""
from . import mps  # noqa: F401
