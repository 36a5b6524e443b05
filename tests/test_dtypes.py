"""int8, int16, uint8 as PyTorch has them (promotion, wrap-around, printing, reductions), a TypeError for
NumPy dtypes tracegrad lacks, and float16 / small integers under tg.compile.

Expected values are PyTorch's (torch.promote_types, torch.tensor(...) results written here); NumPy is the
oracle for element values."""
import re
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.ir import parse, print_graph

SMALL = [(tg.uint8, np.uint8), (tg.int8, np.int8), (tg.int16, np.int16)]
ALL = [tg.bool, tg.uint8, tg.int8, tg.int16, tg.int32, tg.int64, tg.float16, tg.float32, tg.float64]

# torch.promote_types(a, b) for every pair, as PyTorch 2.x returns them (row, column in ALL's order)
_N = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]
PROMOTE = """
bool     bool    uint8   int8    int16   int32   int64   float16 float32 float64
uint8    uint8   uint8   int16   int16   int32   int64   float16 float32 float64
int8     int8    int16   int8    int16   int32   int64   float16 float32 float64
int16    int16   int16   int16   int16   int32   int64   float16 float32 float64
int32    int32   int32   int32   int32   int32   int64   float16 float32 float64
int64    int64   int64   int64   int64   int64   int64   float16 float32 float64
float16  float16 float16 float16 float16 float16 float16 float16 float32 float64
float32  float32 float32 float32 float32 float32 float32 float32 float32 float64
float64  float64 float64 float64 float64 float64 float64 float64 float64 float64
"""
TABLE = {(r.split()[0], _N[j]): c for r in PROMOTE.strip().splitlines() for j, c in enumerate(r.split()[1:])}


def test_names_and_numpy_mapping():
    for d, npd in SMALL:
        assert repr(d) == f"tracegrad.{npd.__name__}" and d.np == np.dtype(npd) and not d.is_floating_point
        assert tg.dtypes.from_name(d.name) is d and tg.dtypes.from_name(d.short) is d
    assert tg.short is tg.int16
    assert [d.short for d, _ in SMALL] == ["u8", "i8", "i16"]


@pytest.mark.parametrize("a", _N)
@pytest.mark.parametrize("b", _N)
def test_promotion_table_is_pytorchs(a, b):
    da, db = tg.dtypes.from_name(a), tg.dtypes.from_name(b)
    assert tg.dtypes.promote_types(da, db).name == TABLE[(a, b)]
    # tensors of one dimension each: the binary op's result dtype is the promoted one
    x, y = tg.ones(2, dtype=da), tg.ones(2, dtype=db)
    assert (x + y).dtype.name == TABLE[(a, b)]


@pytest.mark.parametrize("d,npd", SMALL)
def test_from_numpy_keeps_the_dtype_and_shares_memory(d, npd):
    arr = np.array([1, 2, 3], npd)
    t = tg.from_numpy(arr)
    assert t.dtype is d
    arr[0] = 5
    assert t.tolist() == [5, 2, 3]
    assert tg.tensor(arr).dtype is d and tg.tensor(arr.tolist(), dtype=d).dtype is d


def test_the_issue_repro_int16_wraps_as_pytorch():
    t = tg.from_numpy(np.array([30000], np.int16))
    assert t.dtype is tg.int16
    s = t + t      # PyTorch: tensor([-5536], dtype=torch.int16): int16 arithmetic wraps
    assert s.dtype is tg.int16 and s.tolist() == [-5536]


def test_pytorch_results_for_small_integers():
    u = tg.tensor([200, 100], dtype=tg.uint8)
    i = tg.tensor([-128, 5], dtype=tg.int8)
    assert (u + u).tolist() == [144, 200] and (u + u).dtype is tg.uint8          # wraps mod 256
    assert (u + i).tolist() == [72, 105] and (u + i).dtype is tg.int16           # promoted first: no wrap
    assert (u > i).tolist() == [True, True]
    assert i.abs().tolist() == [-128, 5] and (-i).tolist() == [-128, -5]         # as torch: -128 stays
    assert (u / 8).dtype is tg.float32 and (u / 8).tolist() == [25.0, 12.5]
    assert (u * 1.5).dtype is tg.float32
    assert (u + 1).dtype is tg.uint8 and (i * True).dtype is tg.int8
    assert (u + tg.tensor(3)).dtype is tg.uint8                                 # a 0-d int64 does not widen
    assert (tg.tensor(3, dtype=tg.int8) + u).dtype is tg.uint8
    assert (u // 3).tolist() == [66, 33] and (u % 7).tolist() == [4, 2]
    assert u.to(tg.int8).tolist() == [-56, 100]
    assert u.float().dtype is tg.float32 and i.to(tg.float16).dtype is tg.float16


@pytest.mark.parametrize("d,npd", SMALL)
def test_sum_and_prod_accumulate_in_int64(d, npd):
    t = tg.tensor(np.full((3, 50), 100, npd))
    assert t.sum().dtype is tg.int64 and t.sum().item() == 15000
    assert t.sum(0).dtype is tg.int64 and t.sum(1).tolist() == [5000] * 3
    assert tg.tensor([100, 100, 100], dtype=d).prod().item() == 1000000
    assert t.max().dtype is d and t.max().item() == 100
    with pytest.raises(RuntimeError, match="mean"):
        t.mean()


def test_printing_as_pytorch_with_tracegrad_names():
    assert repr(tg.tensor([1, 2], dtype=tg.int16)) == "tensor([1, 2], dtype=tracegrad.int16)"
    assert repr(tg.tensor([0, 255], dtype=tg.uint8)) == "tensor([  0, 255], dtype=tracegrad.uint8)"
    assert repr(tg.tensor([1, -2], dtype=tg.int8)) == "tensor([ 1, -2], dtype=tracegrad.int8)"
    assert repr(tg.tensor([], dtype=tg.int8)) == "tensor([], dtype=tracegrad.int8)"
    assert repr(tg.tensor(7, dtype=tg.uint8)) == "tensor(7, dtype=tracegrad.uint8)"


def test_factories_take_the_new_dtypes():
    assert tg.zeros(2, 3, dtype=tg.uint8).dtype is tg.uint8
    assert tg.arange(5, dtype=tg.int16).tolist() == [0, 1, 2, 3, 4]
    assert tg.full((2,), 7, dtype=tg.int8).tolist() == [7, 7]
    assert tg.ones(2).to(tg.int8).dtype is tg.int8 and tg.ones(2).to(np.uint8).dtype is tg.uint8
    with pytest.raises(RuntimeError, match="floating point"):
        tg.zeros(2, dtype=tg.int16, requires_grad=True)


@pytest.mark.parametrize("npd", [np.uint16, np.uint32, np.uint64, np.complex64, "datetime64[s]", "U3"])
def test_unsupported_numpy_dtypes_raise_naming_the_dtype(npd):
    arr = np.zeros(2, npd)
    name = str(np.dtype(npd))
    with pytest.raises(TypeError, match=re.escape(name)):
        tg.from_numpy(arr)
    with pytest.raises(TypeError):
        tg.tensor(arr)
    with pytest.raises(TypeError):
        tg.zeros(2, dtype=np.dtype(npd))


@settings(max_examples=30, deadline=None)
@given(a=st.sampled_from(_N[1:6]), b=st.sampled_from(_N[1:6]), op=st.sampled_from(["+", "-", "*", "//", "<", "=="]),
       seed=st.integers(0, 2**31))
def test_integer_arithmetic_matches_numpy_after_pytorch_promotion(a, b, op, seed):
    rng = np.random.default_rng(seed)
    da, db = tg.dtypes.from_name(a), tg.dtypes.from_name(b)
    info_a, info_b = np.iinfo(da.np), np.iinfo(db.np)
    xa = rng.integers(info_a.min, info_a.max, 6, endpoint=True).astype(da.np)
    xb = rng.integers(max(info_b.min, -100), min(info_b.max, 100), 6, endpoint=True).astype(db.np)
    if op == "//":
        xb[xb == 0] = 1
    res = TABLE[(a, b)]
    want = eval(f"xa.astype(res) {op} xb.astype(res)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = eval(f"tg.tensor(xa) {op} tg.tensor(xb)")
    assert got.dtype.name == (res if op not in ("<", "==") else "bool")
    np.testing.assert_array_equal(got.numpy(), want)


# ---------------------------------------------------------------- under tg.compile

def test_ir_text_round_trips_the_new_dtypes():
    def f(x, y, z):
        return x + y, z * 2
    cf = tg.compile(f, backend="interpret")
    args = (tg.ones(2, dtype=tg.uint8), tg.ones(2, dtype=tg.int8), tg.ones(3, dtype=tg.float16))
    text = cf.ir(*args, stage="forward")
    assert "u8[2]" in text and "i8[2]" in text and "i16[2]" in text and "f16[3]" in text
    assert print_graph(parse(text)) == text
@pytest.mark.parametrize("backend", tg.jit.BACKENDS)
@pytest.mark.parametrize("d,npd", SMALL)
def test_compiled_small_integers_match_eager(backend, d, npd):
    def f(x, y):
        z = x * 3 + y
        return z, z.sum(), (x > y).sum(), z.max()
    x = tg.tensor(np.array([[100, 7, 3], [1, 2, 120]], npd))
    y = tg.tensor(np.array([5, 9, 27], npd))
    want = f(x, y)
    got = tg.compile(f, backend=backend)(x, y)
    for w, g in zip(want, got):
        assert g.dtype is w.dtype and g.tolist() == w.tolist()


@pytest.mark.parametrize("backend", tg.jit.BACKENDS)
def test_compiled_float16_values_and_gradients(backend):
    def f(x, w):
        return ((x * w + 1.0).tanh() * 2.0).sum(), x.reshape(-1)[1:] * 0.5
    x = tg.tensor([[0.5, -1.25, 2.0], [0.125, 3.0, -0.75]], dtype=tg.float16, requires_grad=True)
    w = tg.tensor([1.5, -0.5, 0.25], dtype=tg.float16, requires_grad=True)
    ew = f(x, w)
    gw = tg.grad(ew[0], [x, w])
    cf = tg.compile(f, backend=backend)
    ec = cf(x, w)
    gc = tg.grad(ec[0], [x, w])
    for a, b in list(zip(ew, ec)) + list(zip(gw, gc)):
        assert b.dtype is tg.float16 and b.shape == a.shape
        np.testing.assert_allclose(b.detach().numpy().astype(np.float32), a.detach().numpy().astype(np.float32),
                                   rtol=2e-3, atol=2e-3)




@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(["float16", "uint8", "int8", "int16"]),
       shape=st.sampled_from([(0, 3), (1, 1), (3, 17), (2, 3)]),
       frac=st.floats(-1.0, 1.0), special=st.sampled_from([None, "nan", "inf", "max"]), seed=st.integers(0, 2**31))
def test_compiled_copies_and_constants_of_unlowered_dtypes_match_eager(name, shape, frac, special, seed):
    """float16 and the small integers: constants (filled by LLVM kernels) and copies of views
    (transposes, slices) are bit-exact against eager; their arithmetic runs on NumPy, as eager."""
    d = tg.dtypes.from_name(name)
    info = np.finfo(d.np) if d.is_floating_point else np.iinfo(d.np)
    c = float(frac) * float(info.max)
    if d.is_floating_point and special:
        c = {"nan": float("nan"), "inf": float("inf"), "max": float(info.max) * 1.5}[special]
    c = c if d.is_floating_point else int(info.min + (frac + 1) / 2 * (int(info.max) - int(info.min)))
    rng = np.random.default_rng(seed)
    x = tg.tensor((rng.standard_normal(shape) * 5).astype(d.np))

    def f(x):
        return x.T * c, x[:, ::2] + c, tg.full(x.shape, c, dtype=x.dtype), x.T.contiguous()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = f(x)
        got = tg.compile(f, backend="llvm")(x)
    for w, g in zip(want, got):
        assert g.dtype is w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g.numpy(), w.numpy())
