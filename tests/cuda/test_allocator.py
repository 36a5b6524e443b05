"""The caching device allocator (tracegrad/backends/cuda/allocator.py) under the simulator: generated
sequences of allocations, views and frees, each live array filled with a pattern of its own and
checked after every step (a block handed out while an array or a view still references it would be
overwritten), no two live allocations overlapping, blocks reused by size class, the stats (allocated
<= reserved, back to the start when everything is freed), empty_cache, and tensors and a training
step on top of it (host<->device copies still counted)."""
import gc
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.backends.cuda import allocator, memory

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "10"))
DTYPES = [np.float32, np.float64, np.int32, np.int64, np.float16, np.bool_]


def test_size_classes():
    assert allocator.size_class(1) == allocator.size_class(512) == 512
    for n in [513, 1000, 4097, 10 ** 6, 3 * 2 ** 20 + 1]:
        c = allocator.size_class(n)
        assert n <= c < n * 1.25 + 1 and c % 128 == 0
        assert allocator.size_class(c) == c           # a class is its own class


def _pattern(k, arr):
    return (k * 7 + 3) % 100 if arr.dtype != np.bool_ else bool(k % 2)


def _filled(k, n, dtype):
    """A new allocation of n elements holding allocation k's pattern (written by a counted copy)."""
    arr = memory.empty((n,), dtype)
    memory._to_device(np.full(arr.shape, _pattern(k, arr), arr.dtype), arr)
    return arr


def _views(arr, how):
    """A view of arr that keeps its memory alive (the allocation itself may be dropped)."""
    if how == 0 or arr.size < 2:
        return memory.view(arr, (arr.size,), (1,))
    if how == 1:
        return memory.span(arr)[0]
    return memory.view(arr, (arr.size // 2,), (2,), arr.size % 2)


@st.composite
def programs(draw):
    """[("alloc", nbytes-ish size, dtype) | ("free", i) | ("view", i, how) | ("drop", i)]."""
    steps = []
    for _ in range(draw(st.integers(4, 24))):
        steps.append(draw(st.one_of(
            st.tuples(st.just("alloc"), st.sampled_from([1, 3, 64, 100, 127, 128, 200, 700]), st.sampled_from(DTYPES)),
            st.tuples(st.just("free"), st.integers(0, 30)),
            st.tuples(st.just("view"), st.integers(0, 30), st.integers(0, 2)),
            st.tuples(st.just("drop"), st.integers(0, 30)))))
    return steps


def _apply(live, k, step):
    if step[0] == "alloc":
        live[k] = [_filled(k, step[1], step[2])]
        return
    if not live:
        return
    key = sorted(live)[step[1] % len(live)]
    holders = live[key]
    if step[0] == "free" and holders[0] is not None:
        holders[0] = None                          # the allocation goes; its views stay
    elif step[0] == "view" and holders[0] is not None:
        holders.append(_views(holders[0], step[2]))
    elif step[0] == "drop":
        del live[key]                              # the allocation and its views go
    if not any(h is not None for h in holders):
        live.pop(key, None)


def _check(live, steps):
    """Every live array still holds its allocation's pattern, and two allocations never overlap."""
    arrays = [(key, h) for key, hs in live.items() for h in hs if h is not None]
    for key, h in arrays:
        np.testing.assert_array_equal(h.copy_to_host(), _pattern(key, h), err_msg=f"{key} {steps}")
    for i, (ka, a) in enumerate(arrays):
        for kb, b in arrays[i + 1:]:
            assert ka == kb or not memory.may_share_memory(a, b), steps
    stats = memory.memory_stats()
    assert stats["allocated_bytes"] <= stats["reserved_bytes"]


@settings(max_examples=EXAMPLES * 2, deadline=None)
@given(programs())
def test_no_block_is_handed_out_while_referenced(steps):
    gc.collect()
    start = memory.memory_stats()
    live = {}        # k -> [allocation or None, views...]: each keeps allocation k's memory
    for k, step in enumerate(steps):
        _apply(live, k, step)
        _check(live, steps)
    live.clear()
    gc.collect()
    end = memory.memory_stats()
    assert end["allocated_bytes"] == start["allocated_bytes"]
    assert end["reserved_bytes"] - end["allocated_bytes"] >= 0


def test_reuse_by_size_class_and_empty_cache():
    gc.collect()
    memory.empty_cache()
    s0 = memory.memory_stats()
    a = memory.empty((300,), np.float32)                   # 1200 bytes: class 1280
    assert memory.memory_allocated() - s0["allocated_bytes"] == allocator.size_class(1200)
    ptr = memory.data_ptr(a)
    del a
    gc.collect()
    s1 = memory.memory_stats()
    assert s1["allocated_bytes"] == s0["allocated_bytes"] and s1["reserved_bytes"] > s1["allocated_bytes"]
    b = memory.empty((150,), np.float64)                   # another shape, the same class: the same block
    assert memory.data_ptr(b) == ptr and memory.memory_stats()["reuses"] == s1["reuses"] + 1
    c = memory.empty((301,), np.float32)                   # b still lives: a new block
    assert memory.data_ptr(c) != ptr
    del b, c
    gc.collect()
    memory.empty_cache()
    s2 = memory.memory_stats()
    assert s2["reserved_bytes"] == s2["allocated_bytes"] == s0["allocated_bytes"]
    assert tg.cuda.memory_reserved() == s2["reserved_bytes"] and tg.cuda.memory_allocated() == s2["allocated_bytes"]
    assert tg.cuda.max_memory_allocated() >= s0["allocated_bytes"] + 1280


def test_views_of_tensors_keep_their_memory():
    x = tg.arange(40, dtype=tg.float32, device="cuda")
    v = x[3:20:2].reshape(3, 3).mT                          # a strided view; x itself goes
    want = np.arange(40, dtype=np.float32)[3:20:2].reshape(3, 3).T
    del x
    gc.collect()
    junk = [tg.full((40,), -1.0, device="cuda") for _ in range(4)]    # same class: reused blocks
    np.testing.assert_array_equal(v.cpu().numpy(), want)
    assert all((j.cpu().numpy() == -1).all() for j in junk)


def test_training_step_reuses_memory_and_counts_transfers():
    tg.manual_seed(0)
    model = tg.nn.Sequential(tg.nn.Linear(4, 8), tg.nn.Tanh(), tg.nn.Linear(8, 1)).cuda()
    opt = tg.optim.SGD(model.parameters(), lr=0.1)
    x, y = tg.randn(6, 4, device="cuda"), tg.randn(6, 1, device="cuda")

    def step():
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.item()
    step()
    step()          # the second step holds the first's gradients while it runs: its peak is the steady one
    gc.collect()
    before = memory.memory_stats()
    with memory.count_transfers() as c:
        losses = [step() for _ in range(3)]
    gc.collect()
    after = memory.memory_stats()
    assert c.to_host == 3 and c.to_device == 0 and losses[-1] < losses[0]
    assert after["allocations_from_driver"] == before["allocations_from_driver"]   # steady state: all reused
    assert after["allocated_bytes"] == before["allocated_bytes"]


def test_uploads_come_from_the_pool():
    a = np.arange(10, dtype=np.float64)
    with memory.count_transfers() as c:
        d = memory.copy(a, "device")
        back = memory.copy(d, "host")
    assert c.to_device == 1 and c.to_host == 1 and c.bytes == 160
    np.testing.assert_array_equal(back, a)
    assert memory.memory_allocated() >= allocator.size_class(80)


@pytest.mark.parametrize("shape", [(0,), (3, 0), ()])
def test_empty_and_scalar_arrays(shape):
    a = memory.empty(shape, np.float32)
    assert tuple(a.shape) == shape
