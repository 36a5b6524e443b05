"""A map's innermost loop stays a loop that LLVM vectorizes (codegen/loops.py ROLL_MIN): a one-add map
that reads rows of a wider buffer (W12's key plus bias, f32[8,4,64,32] out of [8,64,384]) was unrolled
whole along its 32 unit-stride elements and vectorized across the rows instead (32 scalar loads per
vector, 4x the time of the same map with two adds). Values == NumPy for sizes around the threshold,
static and symbolic; the bench shape's code loads whole vectors."""
import re

import numpy as np
from hypothesis import given, settings, strategies as st

import tracegrad as tg


def head_slice(x, b, B, T, H, dh):
    """The key's heads of a fused qkv projection plus its bias: [B, H, T, dh] from [B, T, 3*H*dh]."""
    return (x + b).reshape(B, T, 3, H, dh).permute(2, 0, 3, 1, 4)[1]


def want(x, b, B, T, H, dh):
    return (x + b).reshape(B, T, 3, H, dh).transpose(2, 0, 3, 1, 4)[1]


def inputs(rng, B, T, H, dh):
    return (rng.standard_normal((B, T, 3 * H * dh)).astype(np.float32),
            rng.standard_normal(3 * H * dh).astype(np.float32))


@settings(max_examples=25)
@given(B=st.integers(1, 3), T=st.integers(1, 9), H=st.integers(1, 3), dh=st.sampled_from([1, 3, 15, 16, 17, 33]),
       seed=st.integers(0, 2 ** 16))
def test_head_slice_matches_numpy(B, T, H, dh, seed):
    """Static sizes, below, at and above ROLL_MIN (a remainder after the vectors): the same float32
    sums as NumPy's, bit for bit (one add per element)."""
    x, b = inputs(np.random.default_rng(seed), B, T, H, dh)
    f = tg.compile(lambda x, b: head_slice(x, b, B, T, H, dh))
    np.testing.assert_array_equal(f(tg.from_numpy(x), tg.from_numpy(b)).numpy(), want(x, b, B, T, H, dh))


def test_head_slice_symbolic_batch():
    """dynamic=True: the batch and sequence symbolic, the head width known; one trace serves each size."""
    H, dh = 2, 17
    f = tg.compile(lambda x, b: head_slice(x, b, x.shape[0], x.shape[1], H, dh), dynamic=True)
    rng = np.random.default_rng(1)
    for B, T in ((2, 5), (3, 7), (1, 2)):
        x, b = inputs(rng, B, T, H, dh)
        np.testing.assert_array_equal(f(tg.from_numpy(x), tg.from_numpy(b)).numpy(), want(x, b, B, T, H, dh))
    assert f.stats()["traces"] == 1


def test_bench_shape_loads_whole_vectors():
    """W12's shape: the optimized code reads the rows' 32 unit-stride elements as vectors, none
    assembled element by element (on main: 0 vector loads, 32 insertelements)."""
    B, T, H, dh = 8, 64, 4, 32
    x, b = inputs(np.random.default_rng(2), B, T, H, dh)
    f = tg.compile(lambda x, b: head_slice(x, b, B, T, H, dh))
    args = tg.from_numpy(x), tg.from_numpy(b)
    np.testing.assert_array_equal(f(*args).numpy(), want(x, b, B, T, H, dh))
    text = f.ir(*args, stage="llvm", optimized=True)
    assert re.findall(r"load <\d+ x float>", text) and "insertelement" not in text
