"""Compiled float16 programs on cuda fuse as float32 ones do: each fusion group one kernel that loads
float16, computes in float32, rounds each op's result to float16 once (as NumPy's float16 loops and
the interpret backend) and stores float16. Checked under the simulator at tiny sizes: values and
gradients == backend="interpret" on the cpu, and the kernels (kinds, spaces, fused ops) the same as
the float32 program's."""
import os
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
import tracegrad.nn.functional as F

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "10"))
POOL = [0.0, -0.0, 1.0, -2.5, 0.1, 3.14159, 1e-6, 6e-8, 60000.0, -65504.0, 300.0, 0.333, np.nan, np.inf, -np.inf]
UNARY = {"neg": lambda a: -a, "abs": lambda a: a.abs(), "relu": lambda a: a.relu(), "square": lambda a: a * a,
         "half": lambda a: a * 0.5, "third": lambda a: a + 1 / 3}
BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "div": lambda a, b: a / b, "maximum": tg.maximum, "minimum": tg.minimum,
          "where": lambda a, b: tg.where(a > b, a, b)}
REDUCE = {"sum": lambda v, ax: v.sum(ax), "amax": lambda v, ax: v.amax(ax), "amin": lambda v, ax: v.amin(ax)}


def structure(f, *args):
    """The kernels of f's compiled programs as `f.ir(stage="kernels")` lists them, without the dtypes
    and byte counts: [kind, space, split, fused ops] per kernel."""
    text = f.ir(*args, stage="kernels")
    return [re.sub(r" -> .*", "", line.strip()) for line in text.splitlines() if line.startswith("  k")]


def ulps_apart(got, want):
    """Per element: how many float16 steps got is from want (0 where both are the same NaN or inf)."""
    got, want = got.astype(np.float64), want.astype(np.float64)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    with np.errstate(invalid="ignore"):
        step = np.spacing(np.abs(want).astype(np.float16)).astype(np.float64)
        return np.where(same, 0, np.abs(got - want) / step)


def run(fn, arrays, dev, backend, grad=False):
    xs = [tg.tensor(a, device=dev, requires_grad=grad) for a in arrays]
    f = tg.compile(fn, backend=backend)
    out = f(*xs)
    if grad:
        w = np.linspace(-1, 1, out.numel()).reshape(out.shape).astype(np.float16)
        (out * tg.tensor(w, device=dev)).sum().backward()
    return f, xs, [out.detach().cpu().numpy()] + ([x.grad.cpu().numpy() for x in xs] if grad else [])


@st.composite
def programs(draw):
    """A straight-line float16 program over x (rows x cols) and y (x's shape, its transpose read
    transposed, or one row broadcast), ending in an elementwise result or a reduction of it."""
    rows, cols = draw(st.integers(1, 3)), draw(st.integers(1, 5))
    layout = draw(st.sampled_from(["same", "transposed", "row"]))
    steps = draw(st.lists(st.one_of(
        st.tuples(st.just("u"), st.sampled_from(sorted(UNARY)), st.integers(0, 9)),
        st.tuples(st.just("b"), st.sampled_from(sorted(BINARY)), st.integers(0, 9), st.integers(0, 9))),
        min_size=1, max_size=6))
    reduce = draw(st.sampled_from([None, *sorted(REDUCE)]))
    axis = draw(st.sampled_from([0, 1]))
    x = np.array(draw(st.lists(st.sampled_from(POOL), min_size=rows * cols, max_size=rows * cols)))
    yshape = {"same": (rows, cols), "transposed": (cols, rows), "row": (cols,)}[layout]
    y = np.array(draw(st.lists(st.sampled_from(POOL), min_size=int(np.prod(yshape)), max_size=int(np.prod(yshape)))))

    def f(a, b):
        vals = [a, b.mT if layout == "transposed" else b]
        for step in steps:
            args = [vals[i % len(vals)] for i in step[2:]]
            vals.append((UNARY if step[0] == "u" else BINARY)[step[1]](*args))
        out = vals[-1] if len(steps) else vals[0]
        if out.shape != (rows, cols):
            out = out + a
        return REDUCE[reduce](out, axis) if reduce else out
    return f, [x.reshape(rows, cols).astype(np.float16), y.reshape(yshape).astype(np.float16)], reduce


@settings(max_examples=EXAMPLES * 2, deadline=None)
@given(programs())
def test_generated_float16_programs_fuse_and_round_each_op_as_interpret(case):
    f, arrays, reduce = case
    with np.errstate(all="ignore"):
        fc, xs, got = run(f, arrays, "cuda", None)
        _, _, want = run(f, arrays, "cpu", "interpret")
    assert got[0].dtype == want[0].dtype == np.float16 and got[0].shape == want[0].shape
    # cheap ops are exact: one float32 op rounded to float16 once; sums add in another order (1 step)
    assert ulps_apart(got[0], want[0]).max(initial=0) <= (1 if reduce == "sum" else 0), (got[0], want[0])
    wide = [a.astype(np.float32) for a in arrays]
    f32 = tg.compile(f)
    f32(*[tg.tensor(a, device="cuda") for a in wide])
    assert structure(fc, *xs) == structure(f32, *[tg.tensor(a, device="cuda") for a in wide])
    assert "[host]" not in fc.ir(*xs, stage="kernels")


def _layernorm(x, w, b):
    return (F.layer_norm(x, (x.shape[-1],), w, b) * x.sigmoid()).sum(0)


def _gelu(x, w, b):
    return F.gelu(x * w + b)


def _softmax(x, w, b):
    return F.softmax(x * w, -1) + b


def _logsumexp_rows(x, w, b):
    m = x.amax(-1, keepdim=True)
    return ((x - m).exp().sum(-1).log() + m.squeeze(-1)) * w.sum() + b.mean()


def _mixed(x, w, b):      # float32 work between float16 loads and stores, as autocast regions do
    return ((x.float() * w.float()).tanh().sum(0) + b.float()).half() * b


@pytest.mark.parametrize("fn", [_layernorm, _gelu, _softmax, _logsumexp_rows, _mixed])
def test_float16_functions_and_gradients_match_interpret_in_the_float32_kernels(fn):
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal((3, 6)) * 2, rng.uniform(0.5, 1.5, 6), rng.standard_normal(6)]
    arrays = [a.astype(np.float16) for a in arrays]
    fc, xs, got = run(fn, arrays, "cuda", None, grad=True)
    _, _, want = run(fn, arrays, "cpu", "interpret", grad=True)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype == np.float16 and g.shape == w.shape
        scale = np.float16(max(1.0, float(np.abs(w.astype(np.float64)).max())))
        # math functions (exp, tanh, erf, ...) may differ in float32's last bit: then one float16
        # step; a few steps after the ops that follow, relative to the output's scale
        assert np.all(np.abs(g.astype(np.float64) - w) <= 4 * np.spacing(scale)), (g, w)
    wide = [tg.tensor(a.astype(np.float32), device="cuda", requires_grad=True) for a in arrays]
    f32 = tg.compile(fn)
    f32(*wide).sum().backward()
    half_kernels = structure(fc, *xs)
    assert "[host]" not in fc.ir(*xs, stage="kernels")
    if fn is not _mixed:                # in float32 its casts are no ops: fewer kernels to compare
        half, single = _without_casts(half_kernels), _without_casts(structure(f32, *wide))
        assert [k.split(" ops=")[0] for k in half] == [k.split(" ops=")[0] for k in single]
        if fn is not _layernorm:        # in float32 its backward recomputes a few more ops
            assert half == single


def _without_casts(kernels):
    """The kernels less their casts: float16 normalizations (layer norm, softmax, mean) compute in
    float32 and store float16, as PyTorch's; a float32 gradient of a float16 weight summed over rows
    is rounded in a kernel of its own (a column sum's epilogue is not fused)."""
    out = []
    for k in kernels:
        head, ops = k.split(" ops=")
        kept = [op for op in ops.split("+") if op != "cast"]
        if kept:
            out.append(head + " ops=" + "+".join(kept))
    return out


def test_a_float16_chain_is_one_kernel_and_reads_each_input_once():
    x = tg.tensor(np.linspace(-3, 3, 12).reshape(3, 4).astype(np.float16), device="cuda")

    def chain(a):
        return ((a * a + 1).sqrt() * a.sigmoid() + 0.25).relu()
    f = tg.compile(chain)
    out = f(x)
    assert f.stats()["kernels"] == 1
    assert structure(f, x) == ["k0 [loop] space=3x4 split=1 ops=mul+add+sqrt+sigmoid+mul+add+relu"]
    src = f.ir(x, stage="cuda")
    assert src.count("b0[") == 1 and src.count("float16(") == 7      # one load; each of 7 ops rounded once
    want = tg.compile(chain, backend="interpret")(x.cpu())
    assert ulps_apart(out.cpu().numpy(), want.numpy()).max() <= 1
