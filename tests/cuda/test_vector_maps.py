"""Elementwise maps over contiguous arrays of a multiple of 16 bytes' worth of elements take 4
(float32, int32) or 2 (float64, int64) elements a thread, read and written by 16-byte vector accesses
when every array's address is aligned, and the scalar loop otherwise (a view starting mid-array):
both give NumPy's values. (tests/test_cuda_ptx_kernels.py checks the vector loads in the PTX.)"""
import os

import numpy as np
from hypothesis import given, settings, strategies as st

import tracegrad as tg

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "6"))


def f(x, y):
    return abs(x * 3 + y) - y * 2


@settings(max_examples=EXAMPLES, deadline=None)
@given(n=st.integers(1, 70), dtype=st.sampled_from(["float32", "float64", "int32", "int64"]),
       start=st.integers(0, 3))
def test_vector_and_scalar_maps_match_numpy(n, dtype, start):
    rng = np.random.default_rng(n)
    base = [(rng.standard_normal(n + start) * 10).astype(dtype) for _ in range(2)]
    x, y = (a[start:] for a in base)
    cf = tg.compile(f)
    dx, dy = (tg.tensor(a, device="cuda")[start:] for a in base)
    got = cf(dx, dy).cpu().numpy()
    np.testing.assert_allclose(got, f(x, y), rtol=1e-6)
    entry = next(iter(cf.cache.values()))
    (ck,) = [c for cks in entry.programs[0].launchers.values() for c in cks]
    width = 16 // np.dtype(dtype).itemsize
    assert ("vload" in ck.source) == (n % width == 0), ck.source
