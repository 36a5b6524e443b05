"""Eager primitives on cuda by kind, under numba's simulator, against the same ops on the cpu: views
(strided views of the same memory), copies (cat, unslice), integer indexing and its scatter-add,
matrix products (the tiled kernel against NumPy), and in-place writes through views."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.core import bind
from tracegrad.backends.cuda.eager import matmul as cuda_matmul
from tracegrad.backends.cuda import memory

pytestmark = pytest.mark.filterwarnings("ignore:tracegrad. matrix products on cuda run a tiled")


def pair(shape, dtype=tg.float32, seed=0):
    x = tg.tensor(np.random.default_rng(seed).standard_normal(shape) * 4, dtype=dtype)
    return x, x.cuda()


def check(c, x, layout=True):
    """A cuda result equals the cpu one: values (exactly), dtype, shape, strides (`layout`)."""
    assert c.device == "cuda:0" and c.dtype is x.dtype and c.shape == x.shape
    np.testing.assert_array_equal(c.cpu().numpy(), x.numpy())
    if not layout:
        return
    assert c.is_contiguous() == x.is_contiguous()
    unit = [n == 1 for n in x.shape]     # (a size-1 axis's stride is free: NumPy's and the remap's differ)
    assert [s for s, u in zip(c.stride(), unit) if not u] == [s for s, u in zip(x.stride(), unit) if not u]


VIEWS = [
    lambda t: t.T, lambda t: t.permute(2, 0, 1), lambda t: t.transpose(0, 2), lambda t: t.mT,
    lambda t: t.reshape(6, 4), lambda t: t.view(-1), lambda t: t.reshape(2, 3, 2, 2),
    lambda t: t[1], lambda t: t[:, 1:3], lambda t: t[..., ::2], lambda t: t[1:, :, 1::2], lambda t: t[None, 0, :, None],
    lambda t: t[:, 0:1].expand(2, 4, 4), lambda t: t[0].unsqueeze(1), lambda t: t[:, :1, :].squeeze(1),
    lambda t: t.flatten(), lambda t: t[:, 1:3], lambda t: t.reshape(2, 3, 2, 2)[:, :, 1],
    lambda t: tg.split(t, 2, 1)[1], lambda t: t.chunk(2, 2)[0], lambda t: t[:, -1],
    lambda t: t.T.reshape(-1),                      # no strides express it: a copy
    lambda t: t[:, 1:].transpose(1, 2)[..., 1:],
]


@pytest.mark.parametrize("k", range(len(VIEWS)))
def test_views_match_the_cpu_and_share_memory(k):
    x, c = pair((2, 3, 4))
    v, w = VIEWS[k](x), VIEWS[k](c)
    check(w, v)
    assert w.storage_offset() == v.storage_offset()
    shares = np.may_share_memory(v.numpy(), x.numpy())
    assert memory.may_share_memory(w._data, c._data) == shares
    if shares:
        assert w._version == c._version
        assert w.data_ptr() - c.data_ptr() == (v.data_ptr() - x.data_ptr())


@settings(max_examples=10, deadline=None)
@given(st.lists(st.sampled_from(["T", "slice", "step", "unsq", "flat", "perm", "expand"]), min_size=1, max_size=4))
def test_generated_view_chains(chain):
    x, c = pair((3, 4))
    for op in chain:
        f = {"T": lambda t: t.T, "slice": lambda t: t[1:] if t.shape[0] > 1 else t,
             "step": lambda t: t[..., ::2], "unsq": lambda t: t.unsqueeze(0), "flat": lambda t: t.reshape(-1),
             "perm": lambda t: t.permute(*reversed(range(t.ndim))),
             "expand": lambda t: t.unsqueeze(0).expand(2, *t.shape)}[op]
        x, c = f(x), f(c)
        check(c, x)


def test_writes_through_views_reach_the_base():
    for dev in ("cpu", "cuda"):
        base = tg.arange(12.0, device=dev).reshape(3, 4)
        v = base[1:, ::2]
        v.fill_(-1.0)
        assert base._version == v._version == 1
        base.T[0].copy_(tg.tensor([7.0, 8.0, 9.0]))
        base[2, 3] = 5.0
        base[:, 1] = tg.tensor([1.0, 2.0, 3.0], device=dev)
        if dev == "cpu":
            want = base.numpy()
        else:
            np.testing.assert_array_equal(base.cpu().numpy(), want)
            assert base._version == 4 and v._version == 4
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        tg.ones(1, 3, device="cuda").expand(2, 3).fill_(0.0)


def test_writes_into_overlapping_memory_read_first():
    for dev in ("cpu", "cuda"):
        t = tg.arange(6.0, device=dev)
        t[1:].copy_(t[:-1])
        got = t.tolist()
        assert got == [0.0, 0.0, 1.0, 2.0, 3.0, 4.0]


def test_cat_stack_and_unslice():
    x, c = pair((2, 3))
    y, d = pair((2, 2), seed=1)
    check(tg.cat([c, d], 1), tg.cat([x, y], 1))
    check(tg.cat([c.T, c.T[:1]], 0), tg.cat([x.T, x.T[:1]], 0), layout=False)   # (NumPy keeps F order)
    check(tg.stack([c, c], 0), tg.stack([x, x], 0))
    check(tg.cat([c[:, :0], c], 1), tg.cat([x[:, :0], x], 1))
    index = ((1, 2, 1), (0, 3, 2))
    unslice = [bind("unslice", t[1:, ::2], shape=(2, 3), index=index) for t in (c, x)]
    check(*unslice)
    i = tg.tensor([1, 0], device="cuda")
    with memory.count_transfers() as n:
        tg.cat([c, d], 1), tg.stack([c, c]), c[i]
    assert n.count == 0


INDEXES = [   # (tensor, index tensors i (into axis 0), j (axis 1), k (axis 2), a boolean mask of its shape)
    lambda t, i, j, k, m: t[i], lambda t, i, j, k, m: t[i, 1:3], lambda t, i, j, k, m: t[:, j],
    lambda t, i, j, k, m: t[i, j], lambda t, i, j, k, m: t[i.reshape(2, 2), :, k.reshape(2, 2)],
    lambda t, i, j, k, m: t[..., k], lambda t, i, j, k, m: t[i[:1], j, k], lambda t, i, j, k, m: t[1:, [2, 0]],
    lambda t, i, j, k, m: t[i.reshape(2, 2)].T, lambda t, i, j, k, m: t[m], lambda t, i, j, k, m: t[1][m[1]],
    lambda t, i, j, k, m: t[tg.tensor(1)], lambda t, i, j, k, m: t[:, tg.tensor([[2], [0]])],
]


@pytest.mark.parametrize("n", range(len(INDEXES)))
def test_integer_indexing_matches_the_cpu(n):
    x, c = pair((2, 3, 4), dtype=tg.float64)
    ix = [tg.tensor([1, 0, -1, 1]), tg.tensor([2, 0, -3, 1]), tg.tensor([3, -1, 0, 2]), tg.tensor(x.numpy() > 0)]
    want, got = INDEXES[n](x, *ix), INDEXES[n](c, *[t.cuda() for t in ix])
    assert got.device == "cuda:0" and got.shape == want.shape and got.dtype is want.dtype
    np.testing.assert_array_equal(got.cpu().numpy(), want.numpy())


def test_int32_indices_and_other_dtypes():
    for dtype in (tg.int64, tg.bool, tg.float16, tg.uint8):
        x = tg.arange(12).reshape(3, 4).to(dtype) if dtype is not tg.bool else tg.arange(12).reshape(3, 4) > 5
        i = tg.tensor([2, 0, 2], dtype=tg.int32)
        np.testing.assert_array_equal(x.cuda()[i.cuda()].cpu().numpy(), x[i].numpy())


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.lists(st.integers(-3, 2), min_size=1, max_size=6), st.integers(0, 1))
def test_scatter_add_matches_numpy(n, m, idx, axis):
    shape = (3, n) if axis == 0 else (n, 3)
    g = np.random.default_rng(m).standard_normal((len(idx), n) if axis == 0 else (n, len(idx)))
    want = np.zeros(shape)
    np.add.at(want, (np.array(idx),) if axis == 0 else (slice(None), np.array(idx)), g)
    got = bind("index_add", tg.tensor(g).cuda(), tg.tensor(idx).cuda(), shape=shape, axes=(axis,))
    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-12, atol=1e-12)


def test_index_out_of_range_is_reported_at_the_next_synchronization():
    c = tg.arange(4.0, device="cuda")
    bad = c[tg.tensor([0, 4], device="cuda")]
    with pytest.raises(IndexError, match="index out of range in an indexing kernel on cuda:0"):
        bad.cpu()
    c[tg.tensor([0, -4], device="cuda")].cpu()                 # the flag was cleared
    c[tg.tensor([9], device="cuda")]
    with pytest.raises(IndexError, match="device-side check"):
        tg.cuda.synchronize()


def test_setitem_with_tensor_indices():
    for dev in ("cpu", "cuda"):
        t = tg.zeros(3, 4, device=dev)
        t[tg.tensor([2, 0], device=dev), 1] = tg.tensor([5.0, 6.0], device=dev)
        t[[1, 1], [3, 2]] = 9.0
        t[tg.tensor([[False, True, False, False]] * 3, device=dev)] = 4.0
        if dev == "cpu":
            want = t.numpy()
        else:
            np.testing.assert_array_equal(t.cpu().numpy(), want)


@pytest.mark.parametrize("a_shape, b_shape", [((5, 7), (7, 3)), ((1, 9), (9, 1)), ((2, 3, 5), (5, 6)),
                                               ((4, 1, 3, 2), (3, 2, 5)), ((6,), (6, 2)), ((3, 4), (4,)),
                                               ((2, 1, 3), (1, 3, 0)), ((2, 0), (0, 3))])
@pytest.mark.parametrize("dtype", [tg.float32, tg.float64])
def test_matmul_tiled_kernel_against_numpy(a_shape, b_shape, dtype):
    a, ca = pair(a_shape, dtype)
    b, cb = pair(b_shape, dtype, seed=1)
    got = ca @ cb
    assert got.device == "cuda:0" and got.dtype is dtype and got.shape == (a @ b).shape
    tol = 1e-5 if dtype is tg.float32 else 1e-13
    np.testing.assert_allclose(got.cpu().numpy(), np.matmul(a.numpy(), b.numpy()), rtol=tol, atol=tol)


def test_matmul_of_strided_operands_and_integers():
    a, ca = pair((6, 5), tg.float64)
    b, cb = pair((3, 6), tg.float64, seed=1)
    np.testing.assert_allclose((ca.T @ cb.T).cpu().numpy(), a.numpy().T @ b.numpy().T, rtol=1e-13)
    np.testing.assert_allclose((ca[::2, 1:].T @ cb[:, ::2].T).cpu().numpy(), a.numpy()[::2, 1:].T @ b.numpy()[:, ::2].T,
                               rtol=1e-13)
    i = tg.arange(12).reshape(3, 4)
    np.testing.assert_array_equal((i.cuda() @ i.T.cuda()).cpu().numpy(), i.numpy() @ i.numpy().T)


def test_matmul_tile_sizes_not_dividing_the_operands():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((2, 5, 7)), rng.standard_normal((7, 3))
    da, db = memory.copy(a, "device"), memory.copy(b, "device")
    for tile in (2, 3, 8):
        out = memory.empty((2, 5, 3), np.float64)
        vb = memory.view(db, (2, 7, 3), (0,) + memory.strides_of(db))
        cuda_matmul._tiled(da, vb, out, 5, 3, 7, tile=tile)
        np.testing.assert_allclose(memory.copy(out, "host"), a @ b, rtol=1e-13)


def test_cublas_operand_layouts():
    """How the cuBLAS path passes each layout (the call itself needs a GPU): row-major as N, column-major
    as T with its leading dimension, other layouts copied."""
    d = memory.copy(np.zeros((4, 6)), "device")
    assert cuda_matmul._operand(d, 4, 6)[1:] == (0, 6)
    t = memory.view(d, (6, 4), (1, 6))
    assert cuda_matmul._operand(t, 6, 4)[1:] == (1, 6)
    odd = memory.view(d, (2, 3), (12, 2))
    x, op, ld = cuda_matmul._operand(odd, 2, 3)
    assert (op, ld) == (0, 3) and memory.row_major(x)
    assert cuda_matmul._merged_batch((2, 3), (12, 4), (0, 0), (30, 10)) == [(6, [4, 0, 10])]
    assert cuda_matmul._merged_batch((2, 3), (4, 8), (0, 0), (30, 10)) == [(2, [4, 0, 30]), (3, [8, 0, 10])]


class _ColumnMajorBlas:
    """cuBLAS's ?gemmStridedBatched contract in NumPy, reading and writing through the raw pointers
    (the simulator's device arrays are host memory): an oracle for how matmul.py calls cuBLAS."""

    def __init__(self):
        self.calls = 0
        self.cublasSgemmStridedBatched = lambda *a: self._gemm(np.float32, *a)
        self.cublasDgemmStridedBatched = lambda *a: self._gemm(np.float64, *a)

    def _gemm(self, dtype, handle, opa, opb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, count):
        import ctypes
        ct, size = (ctypes.c_double, 8) if dtype == np.float64 else (ctypes.c_float, 4)
        m, n, k, lda, ldb, ldc = m.value, n.value, k.value, lda.value, ldb.value, ldc.value

        def matrix(ptr, op, rows, cols, ld):     # op(X) (rows x cols); X column-major, leading dimension ld
            r, c = (rows, cols) if op == 0 else (cols, rows)
            x = np.array([[ct.from_address(ptr + (i + j * ld) * size).value for j in range(c)] for i in range(r)])
            return x if op == 0 else x.T

        for z in range(count.value):
            a = matrix(A.value + z * sa.value * size, opa.value, m, k, lda)
            b = matrix(B.value + z * sb.value * size, opb.value, k, n, ldb)
            c = alpha._obj.value * (a @ b)             # (alpha, beta: byref; C is written, beta is 0)
            assert beta._obj.value == 0
            for i in range(m):
                for j in range(n):
                    ct.from_address(C.value + (z * sc.value + i + j * ldc) * size).value = c[i, j]
        self.calls += 1
        return 0


@pytest.mark.parametrize("a_shape, b_shape, ta, tb", [
    ((3, 4), (4, 2), False, False), ((3, 4), (4, 2), True, True), ((2, 3, 4), (4, 5), True, False),
    ((2, 1, 3, 2), (3, 2, 4), False, True)])
def test_the_cublas_call_computes_numpys_product(a_shape, b_shape, ta, tb):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_shape[:-2] + (a_shape[-1], a_shape[-2]) if ta else a_shape)
    b = rng.standard_normal(b_shape[:-2] + (b_shape[-1], b_shape[-2]) if tb else b_shape)
    da, db = tg.tensor(a).cuda(), tg.tensor(b).cuda()
    da, db = (da.mT if ta else da), (db.mT if tb else db)
    want = np.matmul(da.cpu().numpy(), db.cpu().numpy())
    shape = want.shape
    out = memory.empty(shape, np.float64)
    m, k, n = shape[-2], da.shape[-1], shape[-1]
    batch = shape[:-2]
    blas = _ColumnMajorBlas()
    x = memory.view(da._data, batch + (m, k), cuda_matmul._batch_strides(da._data, batch))
    y = memory.view(db._data, batch + (k, n), cuda_matmul._batch_strides(db._data, batch))
    cuda_matmul._gemm((blas, None), x, y, out, m, n, k)
    np.testing.assert_allclose(memory.copy(out, "host"), want, rtol=1e-12)
    assert blas.calls == (1 if len(batch) < 2 else batch[0])


def test_cublas_is_looked_for_in_the_cuda_12_and_cuda_13_wheels(tmp_path, monkeypatch):
    import sys
    import types
    root = tmp_path / "nvidia"
    cu13 = root / "cu13" / "lib" / "libcublas.so.13"
    cu13.parent.mkdir(parents=True)
    cu13.write_bytes(b"")
    fake = types.ModuleType("nvidia")
    fake.__path__ = [str(root)]
    monkeypatch.setitem(sys.modules, "nvidia", fake)
    assert cuda_matmul.candidates()[0] == str(cu13)          # CUDA 13's nvidia-cublas alone
    cu12 = root / "cublas" / "lib" / "libcublas.so.12"
    cu12.parent.mkdir(parents=True)
    cu12.write_bytes(b"")
    names = cuda_matmul.candidates()
    assert names[:2] == [str(cu12), str(cu13)] and names[-3:] == ["libcublas.so.12", "libcublas.so.13", "libcublas.so"]
