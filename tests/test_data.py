"""tracegrad.utils.data: datasets, random_split, samplers and DataLoader batching, shuffling with a
generator, drop_last and collation, as torch.utils.data (num_workers=0)."""
from collections import namedtuple

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tracegrad as tg
from tracegrad.utils.data import (BatchSampler, ConcatDataset, DataLoader, Dataset, IterableDataset, RandomSampler,
                                  SequentialSampler, Subset, TensorDataset, default_collate, random_split)


def _ds(n):
    return TensorDataset(tg.arange(n * 2.0).reshape(n, 2), tg.arange(n))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 40), bs=st.integers(1, 12), drop_last=st.booleans(), shuffle=st.booleans(),
       seed=st.integers(0, 2 ** 31))
def test_batches_cover_the_dataset(n, bs, drop_last, shuffle, seed):
    dl = DataLoader(_ds(n), batch_size=bs, shuffle=shuffle, drop_last=drop_last,
                    generator=tg.Generator().manual_seed(seed))
    batches = list(dl)
    assert len(batches) == len(dl) == (n // bs if drop_last else -(-n // bs))
    seen = [int(i) for _, y in batches for i in y.tolist()]
    assert all(len(y.tolist()) == bs for _, y in batches[:-1]) and len(set(seen)) == len(seen)
    assert len(seen) == (n // bs * bs if drop_last else n)
    if not shuffle:
        assert seen == list(range(len(seen)))
    # a TensorDataset's batches are gathers: the same as stacking its samples one by one
    slow = DataLoader(_ds(n), batch_size=bs, shuffle=shuffle, drop_last=drop_last,
                      generator=tg.Generator().manual_seed(seed), collate_fn=lambda b: default_collate(b))
    for (x, y), (xs, ys) in zip(batches, slow):
        assert x.tolist() == xs.tolist() and y.tolist() == ys.tolist() and y.dtype == ys.dtype
    for x, y in batches:                                     # sample i is (rows 2i, 2i+1; i)
        np.testing.assert_array_equal(x.numpy(), np.stack([[2.0 * i, 2.0 * i + 1] for i in y.tolist()]))
        assert x.dtype == tg.float32 and y.dtype == tg.int64


def test_shuffle_with_a_generator_is_repeatable_and_changes_each_epoch():
    def order(seed, epochs=2):
        dl = DataLoader(_ds(10), batch_size=3, shuffle=True, generator=tg.Generator().manual_seed(seed))
        return [[int(i) for _, y in dl for i in y.tolist()] for _ in range(epochs)]
    a, b = order(5), order(5)
    assert a == b and a[0] != a[1] and sorted(a[0]) == list(range(10)) and a != order(6)
    tg.manual_seed(0)                     # without a generator: the global one
    c = [int(i) for _, y in DataLoader(_ds(10), batch_size=4, shuffle=True) for i in y.tolist()]
    tg.manual_seed(0)
    assert c == [int(i) for _, y in DataLoader(_ds(10), batch_size=4, shuffle=True) for i in y.tolist()]


def test_default_collate_of_numbers_dicts_tuples_and_strings():
    Pair = namedtuple("Pair", "a b")
    batch = default_collate([{"x": 1.5, "n": 2, "ok": True, "s": "u", "t": (np.ones(2, np.float32), Pair(1, 2.0))},
                             {"x": 2.5, "n": 3, "ok": False, "s": "v", "t": (np.zeros(2, np.float32), Pair(3, 4.0))}])
    assert batch["x"].dtype == tg.float64 and batch["x"].tolist() == [1.5, 2.5]
    assert batch["n"].dtype == tg.int64 and batch["ok"].dtype == tg.bool and batch["s"] == ["u", "v"]
    arrays, pair = batch["t"]                                 # a tuple collates into a list, as torch
    assert isinstance(batch["t"], list) and arrays.dtype == tg.float32 and arrays.shape == (2, 2)
    assert isinstance(pair, Pair) and pair.a.tolist() == [1, 3]
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([(1, 2), (1,)])
    with pytest.raises(TypeError, match="default_collate: batch must contain"):
        default_collate([object()])


def test_collate_fn_batch_size_none_and_custom_dataset():
    class Squares(Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return {"i": i, "sq": np.array([i * i], np.float32)}
    dl = DataLoader(Squares(), batch_size=2, collate_fn=lambda b: [d["i"] for d in b])
    assert list(dl) == [[0, 1], [2, 3], [4]]
    one = list(DataLoader(Squares(), batch_size=None))
    assert one[3]["i"] == 3 and isinstance(one[3]["sq"], tg.Tensor) and one[3]["sq"].tolist() == [9.0]
    full = next(iter(DataLoader(Squares(), batch_size=5)))
    assert full["i"].tolist() == [0, 1, 2, 3, 4] and full["sq"].shape == (5, 1)


def test_iterable_dataset_and_samplers():
    class Count(IterableDataset):
        def __iter__(self):
            return iter(range(7))
    assert [b.tolist() for b in DataLoader(Count(), batch_size=3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [b.tolist() for b in DataLoader(Count(), batch_size=3, drop_last=True)] == [[0, 1, 2], [3, 4, 5]]
    ds = _ds(6)
    bs = BatchSampler(SequentialSampler(ds), 4, drop_last=False)
    assert list(bs) == [[0, 1, 2, 3], [4, 5]] and len(bs) == 2
    assert [y.tolist() for _, y in DataLoader(ds, batch_sampler=bs)] == [[0, 1, 2, 3], [4, 5]]
    r = list(RandomSampler(ds, replacement=True, num_samples=20, generator=tg.Generator().manual_seed(0)))
    assert len(r) == 20 and set(r) <= set(range(6))
    more = list(RandomSampler(ds, num_samples=9, generator=tg.Generator().manual_seed(0)))
    assert sorted(more[:6]) == list(range(6)) and len(set(more[6:])) == 3      # a permutation, then part of another


def test_loader_errors():
    with pytest.raises(ValueError, match="num_workers=0"):
        DataLoader(_ds(3), num_workers=2)
    with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
        DataLoader(_ds(3), sampler=SequentialSampler(_ds(3)), shuffle=True)
    with pytest.raises(ValueError, match="Size mismatch between tensors"):
        TensorDataset(tg.ones(3), tg.ones(4))


def test_random_split_subset_concat():
    ds = _ds(10)
    a, b, c = random_split(ds, [0.5, 0.3, 0.2], generator=tg.Generator().manual_seed(0))
    assert (len(a), len(b), len(c)) == (5, 3, 2)
    assert sorted(a.indices + b.indices + c.indices) == list(range(10))
    a2, _, _ = random_split(ds, [5, 3, 2], generator=tg.Generator().manual_seed(0))
    assert a2.indices == a.indices
    x, y = a[1]
    assert int(y) == a.indices[1] and x.tolist() == [2.0 * a.indices[1], 2.0 * a.indices[1] + 1]
    sizes = [len(s) for s in random_split(range(11), [0.34, 0.33, 0.33])]
    assert sizes == [4, 4, 3]          # as torch 2.13: floors 3, 3, 3, the remainder of 2 round-robin from the first
    with pytest.raises(ValueError, match="Sum of input lengths"):
        random_split(ds, [3, 3])
    cat = ConcatDataset([Subset(ds, [9, 8]), _ds(3)])
    assert len(cat) == 5 and int(cat[1][1]) == 8 and int(cat[2][1]) == 0 and int(cat[-1][1]) == 2


def test_distributed_sampler_under_its_torch_name():
    from tracegrad.utils.data.distributed import DistributedSampler
    ds = _ds(10)
    parts = [[int(i) for _, y in DataLoader(ds, batch_size=3, sampler=DistributedSampler(ds, 2, r, shuffle=False))
              for i in y.tolist()] for r in (0, 1)]
    assert parts == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]] and tg.utils.data.DistributedSampler is DistributedSampler
