"""DistributedSampler, as PyTorch's torch.utils.data.distributed.DistributedSampler: each rank iterates over
its own share of a dataset's indices, len(dataset) / world size of them.

Shuffled (the default) with a permutation drawn from seed + epoch (call set_epoch(e) before each epoch,
or every epoch repeats the order), identical on every rank; rank r takes positions r, r + world, ...
Without drop_last the indices are padded by repeating the first ones until they divide evenly; with
drop_last the tail that does not divide is dropped. The permutation comes from NumPy's generator, so
the order differs from PyTorch's for the same seed (the partition rule is the same)."""
import math

import numpy as np


class DistributedSampler:
    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        from . import get_rank, get_world_size, is_initialized
        if num_replicas is None or rank is None:
            if not is_initialized():
                raise RuntimeError("DistributedSampler: pass num_replicas and rank, or call "
                                   "tracegrad.distributed.init_process_group() first")
            num_replicas = get_world_size() if num_replicas is None else num_replicas
            rank = get_rank() if rank is None else rank
        if not 0 <= rank < num_replicas:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.dataset, self.num_replicas, self.rank = dataset, int(num_replicas), int(rank)
        self.shuffle, self.seed, self.drop_last, self.epoch = bool(shuffle), int(seed), bool(drop_last), 0
        n = len(dataset)
        if self.drop_last and n % self.num_replicas:
            self.num_samples = math.ceil((n - self.num_replicas) / self.num_replicas)
        else:
            self.num_samples = math.ceil(n / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            indices = np.random.default_rng(self.seed + self.epoch).permutation(n).tolist()
        else:
            indices = list(range(n))
        if not self.drop_last:
            pad = self.total_size - len(indices)
            if pad and indices:
                indices += (indices * math.ceil(pad / len(indices)))[:pad]
        else:
            indices = indices[:self.total_size]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        """The epoch whose permutation __iter__ draws (seed + epoch)."""
        self.epoch = int(epoch)
