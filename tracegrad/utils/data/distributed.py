"""torch.utils.data.distributed's name: DistributedSampler lives with the process groups it reads."""
from ...distributed.sampler import DistributedSampler

__all__ = ["DistributedSampler"]
