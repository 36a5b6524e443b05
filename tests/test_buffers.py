"""Buffer planning (lowering/buffers.py): intermediates share memory only when their lives do not
overlap, and a compiled program holds far less than all of its intermediates."""
import types

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad import dtypes
from tracegrad.lowering import buffers
from tracegrad.backends.cpu.runtime import Program
from tracegrad.ir.graph import Value
from tracegrad.ir.kernels import Load


@st.composite
def programs(draw):
    """Steps that each write 1-2 new values and read some earlier ones (like fused kernels)."""
    n_steps = draw(st.integers(1, 12))
    values, kernels = [], []
    for j in range(n_steps):
        reads = draw(st.lists(st.sampled_from(values), max_size=3)) if values else []
        outs = [Value(tuple(draw(st.lists(st.integers(0, 6), max_size=2))),
                      draw(st.sampled_from([dtypes.float32, dtypes.float64, dtypes.int64, dtypes.bool_])))
                for _ in range(draw(st.integers(1, 2)))]
        kernels.append(types.SimpleNamespace(outputs=outs, reads=[Load(v, (0,) * len(v.shape)) for v in reads]))
        values += outs
    return kernels, values


@settings(max_examples=200, deadline=None)
@given(programs())
def test_live_intermediates_never_share_memory(prog):
    kernels, values = prog
    written = {id(v): j for j, k in enumerate(kernels) for v in k.outputs}
    last = dict(written)
    for j, k in enumerate(kernels):
        for ld in k.reads:
            last[id(ld.buf)] = j
    arrays = buffers.plan(kernels, list(enumerate(values)))
    for slot, v in enumerate(values):
        a = arrays[slot]
        assert a.shape == v.shape and a.dtype == v.dtype.np and a.flags.c_contiguous
    for i, u in enumerate(values):
        for j, v in enumerate(values[i + 1:], i + 1):
            if np.shares_memory(arrays[i], arrays[j]):
                # one value's last reader ran before the other was written (never the same step)
                assert last[id(u)] < written[id(v)] or last[id(v)] < written[id(u)], (u, v)


def _held(f):
    """Bytes of intermediate memory each program of compiled function f keeps, and the naive sum."""
    import gc
    progs = [o for o in gc.get_objects() if type(o) is Program and o.graph.name.startswith(f.__name__)]
    held, naive = 0, 0
    for p in progs:
        blocks = {}
        for a in p.template:
            if a is not None:
                naive += a.nbytes
                blocks[id(a.base)] = a.base.nbytes
        held += sum(blocks.values())
    return held, naive


def test_a_long_unfused_chain_reuses_two_blocks():
    x = tg.tensor(np.random.default_rng(0).standard_normal(1000).astype(np.float32), requires_grad=True)

    def chain(x):
        for c in range(12):
            x = (x * (1.0 + c / 10)).tanh()
        return x.sum()
    chain.__name__ = "chain_for_buffers"
    f = tg.compile(chain, fuse=False)
    want = chain(x)
    got = f(x)
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
    (gx,), (ex,) = tg.grad(f(x), [x]), tg.grad(chain(x), [x])
    np.testing.assert_allclose(gx.numpy(), ex.numpy(), rtol=1e-5, atol=1e-6)
    held, naive = _held(f)
    assert naive >= 20 * 4000 and held <= naive / 4
