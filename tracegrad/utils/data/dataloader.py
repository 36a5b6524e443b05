"""DataLoader: batches of a dataset, in order or shuffled, in the calling process."""
from ... import dtypes as D
from ...tensor import tensor
from .collate import default_collate, default_convert
from .dataset import IterableDataset, TensorDataset
from .sampler import BatchSampler, RandomSampler, SequentialSampler


class DataLoader:
    """As torch.utils.data.DataLoader with num_workers=0: batch_size (None: samples one by one),
    shuffle (a new permutation each epoch, from `generator` or the global generator), sampler or
    batch_sampler, drop_last, collate_fn (default_collate)."""

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None, *,
                 generator=None, prefetch_factor=None, persistent_workers=False):
        if num_workers != 0:
            raise ValueError(f"DataLoader(num_workers={num_workers}): tracegrad loads data in the calling process "
                             f"only; use num_workers=0 (tracegrad's compiled steps already use every core)")
        if timeout or prefetch_factor is not None or persistent_workers:
            raise ValueError("timeout, prefetch_factor and persistent_workers need worker processes, which "
                             "tracegrad's DataLoader does not use (num_workers=0)")
        self.dataset, self.num_workers, self.pin_memory, self.generator = dataset, 0, pin_memory, generator
        self.iterable = isinstance(dataset, IterableDataset)
        if self.iterable and (shuffle or sampler is not None or batch_sampler is not None):
            raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle, sampler and batch_sampler")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and "
                                 "drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with drop_last")
        if sampler is None and not self.iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not self.iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size, self.drop_last, self.sampler, self.batch_sampler = batch_size, drop_last, sampler, batch_sampler
        self.collate_fn = collate_fn if collate_fn is not None else \
            default_collate if batch_size is not None or batch_sampler is not None else default_convert

    def __iter__(self):
        if self.iterable:
            return self._iterable_batches()
        if self.batch_sampler is not None:
            return (self._batch(b) for b in self.batch_sampler)
        return (self.collate_fn(self.dataset[i]) for i in self.sampler)

    def _batch(self, indices):
        """collate_fn of the samples at `indices`; a TensorDataset's batch under default_collate is one
        gather per tensor (the same values as stacking the samples, without a Python step per sample)."""
        if type(self.dataset) is TensorDataset and self.collate_fn is default_collate:
            idx = tensor(indices, dtype=D.int64)
            return [t[idx] for t in self.dataset.tensors]
        return self.collate_fn([self.dataset[i] for i in indices])

    def _iterable_batches(self):
        if self.batch_size is None:
            yield from (self.collate_fn(x) for x in self.dataset)
            return
        batch = []
        for x in self.dataset:
            batch.append(x)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)

    def __len__(self):
        if self.iterable:
            n = len(self.dataset)
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self.batch_sampler) if self.batch_sampler is not None else len(self.sampler)
