"""Random graphs: hypothesis draws a program (random ops, shapes that broadcast, reductions over random
axes, views), runs it eagerly and compiled, and compares values and gradients in float64 (1e-6).

TRACEGRAD_FUZZ_EXAMPLES raises the example count (default 60, for CI)."""
import os
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.ir import parse, print_graph

EXAMPLES = int(os.environ.get("TRACEGRAD_FUZZ_EXAMPLES", "60"))
TOL = 1e-6

UNARY = {
    "tanh": lambda x: x.tanh(),
    "sigmoid": lambda x: x.sigmoid(),
    "sin": lambda x: x.sin(),
    "neg": lambda x: -x,
    "relu": lambda x: x.relu(),
    "exp_tanh": lambda x: x.tanh().exp(),
    "log1p_sq": lambda x: (x * x + 1.0).log(),
    "sqrt1p_sq": lambda x: (x * x + 1.0).sqrt(),
    "abs": lambda x: x.abs(),
    "square_half": lambda x: x.square() * 0.5,
    "scale_shift": lambda x: x * 0.7 - 0.2,
    "clamp": lambda x: x.clamp(-0.5, 0.5),
    "pow3": lambda x: x ** 3,
}
BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (b * b + 1.0),
    "maximum": lambda a, b: tg.maximum(a, b),
    "where": lambda a, b: tg.where(a > b, a, b * 0.5),
}


def _broadcast_partner(draw, shape):
    """A shape that broadcasts with `shape`: a suffix of it with some sizes set to 1."""
    k = draw(st.integers(0, len(shape)))
    suffix = list(shape[len(shape) - k:])
    return tuple(1 if draw(st.booleans()) else s for s in suffix)


def _shape(draw, sizes, ndim):
    """`ndim` sizes drawn from `sizes`; after one size above 3 the rest are small (bounded work)."""
    out = []
    for _ in range(ndim):
        n = draw(sizes)
        if any(m > 3 for m in out):
            n = min(n, 3)
        out.append(n)
    return tuple(out)


@st.composite
def programs(draw, sizes=st.integers(1, 4)):
    """(input shapes, steps): each step appends a value computed from earlier ones."""
    ndim = draw(st.integers(1, 3))
    shape0 = _shape(draw, sizes, ndim)
    inputs = [shape0]
    shapes = [shape0]          # shapes of the pool values (inputs first)
    steps = []
    for _ in range(draw(st.integers(1, 7))):
        i = draw(st.integers(0, len(shapes) - 1))
        s = shapes[i]
        kind = draw(st.sampled_from(["unary", "binary", "binary", "reduce", "view"]))
        if kind == "unary":
            op = draw(st.sampled_from(sorted(UNARY)))
            steps.append(("unary", op, i))
            shapes.append(s)
        elif kind == "binary":
            op = draw(st.sampled_from(sorted(BINARY)))
            partners = [j for j, t in enumerate(shapes) if _broadcasts(s, t)]
            if partners and draw(st.booleans()):
                j = draw(st.sampled_from(partners))
            else:
                inputs.append(_broadcast_partner(draw, s))
                shapes.insert(len(inputs) - 1, inputs[-1])
                steps = [_shift(stp, len(inputs) - 1) for stp in steps]
                i = i + 1 if i >= len(inputs) - 1 else i
                j = len(inputs) - 1
            swap = draw(st.booleans())
            steps.append(("binary", op, (j, i) if swap else (i, j)))
            shapes.append(_bshape(s, shapes[j]))
        elif kind == "reduce":
            if not s:
                continue
            op = draw(st.sampled_from(["sum", "mean", "max", "logsumexp", "var"]))
            axes = draw(st.lists(st.integers(-len(s), len(s) - 1), min_size=1, max_size=len(s), unique_by=
                                 lambda a: a % len(s)))
            if op in ("max", "logsumexp", "var"):
                axes = axes[:1]
                if s[axes[0]] == 0:         # max over nothing is an error (eager too)
                    op = "sum"
            keep = draw(st.booleans())
            steps.append(("reduce", op, i, tuple(axes), keep))
            norm = {a % len(s) for a in axes}
            shapes.append(tuple((1 if d in norm else n) for d, n in enumerate(s) if keep or d not in norm))
        else:
            options = ["reshape", "unsqueeze", "expand"] + (["transpose"] if s else []) + \
                (["slice"] if any(s) else []) + (["gather"] if s and s[0] else [])
            op = draw(st.sampled_from(options))
            if op == "transpose":
                perm = tuple(draw(st.permutations(range(len(s)))))
                steps.append(("view", "permute", i, perm))
                shapes.append(tuple(s[p] for p in perm))
            elif op == "reshape":
                n = int(np.prod(s))
                target = draw(st.sampled_from([(n,), (1, n), (n, 1)] + ([(-1,) + s[-1:]] if s and s[-1] else [])))
                steps.append(("view", "reshape", i, target))
                shapes.append(tuple(np.empty(s).reshape(target).shape))
            elif op == "unsqueeze":
                d = draw(st.integers(0, len(s)))
                steps.append(("view", "unsqueeze", i, d))
                shapes.append(s[:d] + (1,) + s[d:])
            elif op == "expand":
                k = draw(st.integers(1, 3))
                steps.append(("view", "expand", i, (k,) + s))
                shapes.append((k,) + s)
            elif op == "slice":
                d = draw(st.sampled_from([k for k in range(len(s)) if s[k]]))
                start = draw(st.integers(0, s[d] - 1))
                step = draw(st.integers(1, 2))
                steps.append(("view", "slice", i, (d, start, step)))
                shapes.append(s[:d] + (len(range(start, s[d], step)),) + s[d + 1:])
            else:   # integer-array indexing along the first axis (repeats allowed)
                idx = tuple(draw(st.lists(st.integers(0, s[0] - 1), min_size=1, max_size=4)))
                steps.append(("view", "gather", i, idx))
                shapes.append((len(idx),) + s[1:])
    n_out = draw(st.integers(1, 2))
    outs = sorted(set(draw(st.lists(st.integers(len(inputs), len(shapes) - 1), min_size=n_out, max_size=n_out))))
    if len(shapes) == len(inputs):      # nothing computed: return a function of the first input
        steps.append(("unary", "tanh", 0))
        shapes.append(shapes[0])
        outs = [len(shapes) - 1]
    return inputs, steps, outs


def _shift(step, at):
    """Renumber pool indices >= `at` after inserting a new input there."""
    kind, op, ref, *rest = step
    bump = lambda k: k + 1 if k >= at else k  # noqa: E731
    ref = tuple(bump(k) for k in ref) if isinstance(ref, tuple) else bump(ref)
    return (kind, op, ref, *rest)


def _broadcasts(a, b):
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


def _bshape(a, b):
    return tuple(np.broadcast_shapes(a, b))


def build(steps, outs, n_inputs):
    def program(*xs):
        pool = list(xs)
        for kind, op, ref, *rest in steps:
            if kind == "unary":
                pool.append(UNARY[op](pool[ref]))
            elif kind == "binary":
                pool.append(BINARY[op](pool[ref[0]], pool[ref[1]]))
            elif kind == "reduce":
                axes, keep = rest
                x = pool[ref]
                if op in ("sum", "mean"):
                    pool.append(getattr(x, op)(axis=axes, keepdims=keep))
                elif op == "max":
                    pool.append(x.amax(axis=axes[0], keepdims=keep))
                elif op == "logsumexp":
                    pool.append(x.logsumexp(axis=axes[0], keepdims=keep))
                else:
                    pool.append(x.var(axis=axes[0], keepdims=keep))
            else:
                (arg,) = rest
                x = pool[ref]
                if op == "permute":
                    pool.append(x.permute(*arg))
                elif op == "reshape":
                    pool.append(x.reshape(*arg))
                elif op == "unsqueeze":
                    pool.append(x.unsqueeze(arg))
                elif op == "expand":
                    pool.append(x.expand(*arg))
                elif op == "slice":
                    d, start, step = arg
                    idx = (slice(None),) * d + (slice(start, None, step),)
                    pool.append(x[idx])
                else:
                    pool.append(x[tg.tensor(np.array(arg), dtype=tg.int64)])
        return tuple(pool[k] for k in outs)
    return program


@settings(max_examples=EXAMPLES, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(prog=programs(), seed=st.integers(0, 2**32 - 1), backend=st.sampled_from(tg.jit.BACKENDS))
def test_random_graphs_match_eager(prog, seed, backend):
    shapes, steps, outs = prog
    rng = np.random.default_rng(seed)
    fn = build(steps, outs, len(shapes))
    args = []
    for s in shapes:
        t = tg.tensor(rng.standard_normal(s), dtype=tg.float64)
        t.requires_grad = True
        args.append(t)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tg.BroadcastWarning)
        eager = fn(*args)
        cf = tg.compile(fn, backend=backend)
        comp = cf(*args)
        assert len(eager) == len(comp)
        for e, c in zip(eager, comp):
            assert e.shape == c.shape and e.dtype == c.dtype
            np.testing.assert_allclose(c.detach().numpy(), e.detach().numpy(), rtol=TOL, atol=TOL)
        cots = [tg.tensor(rng.standard_normal(e.shape), dtype=tg.float64) for e in eager]
        ge = tg.grad(list(eager), args, grad_outputs=cots, allow_unused=True)
        gc = tg.grad(list(comp), args, grad_outputs=cots, allow_unused=True)
        for k, (a, b) in enumerate(zip(ge, gc)):
            a = np.zeros(shapes[k]) if a is None else a.detach().numpy()
            b = np.zeros(shapes[k]) if b is None else b.detach().numpy()
            np.testing.assert_allclose(b, a, rtol=TOL, atol=TOL, err_msg=f"gradient of input {k}")
        # every graph round-trips through the text format
        for stage in ("traced", "forward", "backward"):
            text = cf.ir(*args, stage=stage)
            assert print_graph(parse(text)) == text
        assert cf.stats()["traces"] == 1


# ---------------------------------------------------------------------- llvm vs interpret vs eager

ODD_SIZES = st.sampled_from([0, 1, 2, 3, 17, 1023])
LLVM_EXAMPLES = int(os.environ.get("TRACEGRAD_FUZZ_EXAMPLES", "40"))


def _assert_close(got, want, dtype, what):
    """float64: 1e-6. float32: rtol 1e-4 with an absolute floor scaled by the reference's magnitude
    (fused kernels reassociate sums and use their own exp/tanh/...; NumPy does neither)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, what
    if dtype == "float64":
        np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL, err_msg=what)
        return
    finite = want[np.isfinite(want)]
    scale = max(1.0, float(np.max(np.abs(finite)))) if finite.size else 1.0
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale, err_msg=what)


@settings(max_examples=LLVM_EXAMPLES, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(prog=programs(sizes=ODD_SIZES), seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from(["float32", "float64"]),
       threaded=st.booleans())
def test_llvm_matches_interpret_and_eager(prog, seed, dtype, threaded):
    """Odd sizes (1, 3, 17, 1023), empty tensors, float32 and float64: the llvm backend agrees with the
    interpret backend and with eager, in values and in gradients. `threaded` splits every kernel
    across the thread pool, however small."""
    from tracegrad.backends.cpu import machine
    with machine.override(**({"parallel_min_work": 1} if threaded else {})):
        _llvm_vs_interpret_vs_eager(prog, seed, dtype)


def _llvm_vs_interpret_vs_eager(prog, seed, dtype):
    shapes, steps, outs = prog
    rng = np.random.default_rng(seed)
    fn = build(steps, outs, len(shapes))
    args = []
    for s in shapes:
        t = tg.tensor(rng.standard_normal(s), dtype=getattr(tg, dtype))
        t.requires_grad = True
        args.append(t)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tg.BroadcastWarning)
        warnings.simplefilter("ignore", RuntimeWarning)       # mean of an empty axis is nan, as in NumPy
        eager = fn(*args)
        runs = {b: tg.compile(fn, backend=b)(*args) for b in ("interpret", "llvm")}
        cots = [tg.tensor(rng.standard_normal(e.shape), dtype=e.dtype) for e in eager]
        grads = {"eager": tg.grad(list(eager), args, grad_outputs=cots, allow_unused=True)}
        for b, outs_b in runs.items():
            assert len(outs_b) == len(eager)
            for k, (e, c) in enumerate(zip(eager, outs_b)):
                assert e.shape == c.shape and e.dtype == c.dtype, (b, k)
            grads[b] = tg.grad(list(outs_b), args, grad_outputs=cots, allow_unused=True)
    for k, (e, i, c) in enumerate(zip(eager, runs["interpret"], runs["llvm"])):
        _assert_close(c.detach().numpy(), i.detach().numpy(), dtype, f"output {k}: llvm vs interpret")
        _assert_close(c.detach().numpy(), e.detach().numpy(), dtype, f"output {k}: llvm vs eager")
    for k in range(len(args)):
        ref = grads["eager"][k]
        ref = np.zeros(shapes[k]) if ref is None else ref.detach().numpy()
        for b in ("interpret", "llvm"):
            g = grads[b][k]
            g = np.zeros(shapes[k]) if g is None else g.detach().numpy()
            _assert_close(g, ref, dtype, f"gradient of input {k}: {b} vs eager")


# ---------------------------------------------------------------------- the stand-alone fuzzer (tracegrad.fuzz)

def test_fuzz_slice_graph_and_inplace_programs_agree(tmp_path):
    """A seed-fixed slice of `python -m tracegrad fuzz`: straight-line and in-place programs."""
    from tracegrad.fuzz import fuzz
    from tracegrad.fuzz.runner import format_summary
    s = fuzz(10, 0, kinds=["graph", "inplace"], out=str(tmp_path), do_shrink=False, log=lambda *a: None)
    assert s["programs"] == 10 and set(s["by_kind"]) == {"graph", "inplace"}
    assert s["mismatch_programs"] == s["error_programs"] == s["accepted_programs"] == 0, format_summary(s)


def test_fuzz_slice_mutate_train_state_programs_agree(tmp_path):
    """Inputs updated under no_grad (and through .data/.detach()), training steps with state changes
    between calls, globals read through a dict and changed between calls."""
    from tracegrad.fuzz import fuzz
    from tracegrad.fuzz.runner import format_summary
    s = fuzz(6, 0, kinds=["mutate", "train", "state"], out=str(tmp_path), do_shrink=False, log=lambda *a: None)
    assert s["mismatch_programs"] == s["error_programs"] == s["accepted_programs"] == 0, format_summary(s)


def test_fuzz_slice_alias_programs_agree(tmp_path):
    from tracegrad.fuzz import fuzz
    from tracegrad.fuzz.runner import format_summary
    s = fuzz(4, 0, kinds=["alias"], out=str(tmp_path), do_shrink=False, log=lambda *a: None)
    assert s["mismatch_programs"] == s["error_programs"] == s["accepted_programs"] == 0, format_summary(s)


def test_fuzz_slice_numeric_programs_agree(tmp_path):
    """float16 reductions over values whose float16 sums overflow, integer division and out-of-range
    Python ints: both halves of the kind are drawn, and eager and compiled agree (or both raise)."""
    from tracegrad.fuzz import fuzz, generate
    from tracegrad.fuzz.runner import format_summary
    dtypes = {generate(i, 0, kind="numeric").dtype for i in range(12)}
    assert dtypes == {"float16", "float64"}            # float64: the integer programs' nominal dtype
    s = fuzz(12, 0, kinds=["numeric"], out=str(tmp_path), do_shrink=False, log=lambda *a: None)
    assert s["mismatch_programs"] == s["error_programs"] == s["accepted_programs"] == 0, format_summary(s)


def test_fuzz_generates_every_kind_and_the_same_program_for_a_seed():
    from tracegrad.fuzz import KINDS, generate
    a = [generate(i, 5).source() for i in range(60)]
    assert a == [generate(i, 5).source() for i in range(60)]
    assert {generate(i, 5).kind for i in range(100)} == set(KINDS)


def test_fuzz_flags_wrong_values_and_backend_errors(monkeypatch):
    """The comparison can fail: a backend whose values are off by 1e-3 (relative), or that raises."""
    from tracegrad.fuzz import generate, runner
    real = runner.observe

    def skewed(run, mode, dtype):
        obs = real(run, mode, dtype)
        if mode == "llvm":
            obs.items = [(k, v * (1 + 1e-3) + 1e-3 if v is not None and v.dtype.kind == "f" else v)
                         for k, v in obs.items]
        if mode == "interpret":
            obs = runner.Observation(error=("KeyError", "float16"))
        return obs
    monkeypatch.setattr(runner, "observe", skewed)
    program = generate(0, 0, kind="graph", dtype="float64")
    _, problems = runner.check(program)
    assert {b for b, c, _ in problems} == {"interpret", "llvm"}
    assert ("interpret", "error:KeyError") in {(b, c) for b, c, _ in problems}
    assert all(c.startswith("value:") for b, c, _ in problems if b == "llvm")


def test_fuzz_tolerances():
    from tracegrad.fuzz.compare import compare_values
    e = np.array([1.0, np.nan, np.inf, 1e-3], np.float32)
    r = e.astype(np.float64)
    assert compare_values(e, e * np.float32(1 + 1e-5), r, "float32") is None
    assert compare_values(e, e * np.float32(1 + 1e-2), r, "float32")[0] == "value"
    assert compare_values(e, np.array([1.0, 0.0, np.inf, 1e-3], np.float32), r, "float32")[0] == "value"
    assert compare_values(e, e.astype(np.float64), r, "float32")[0] == "dtype"
    b = np.array([True, False])
    assert compare_values(b, ~b, b, "float32")[0] == "value"
    assert compare_values(b, ~b, ~b, "float32") is None     # where eager float32 itself disagrees with float64
    # a float32 program's float64 value (x.double() + t): the float64 reference ran on float64 inputs,
    # so it differs from eager by the inputs' float32 rounding; a backend equal to eager agrees
    x = np.array([1.0000001, 2.0])
    e64, r64 = np.log(x.astype(np.float32).astype(np.float64) - 1), np.log(x - 1)
    assert compare_values(e64, e64.copy(), r64, "float32") is None
    assert compare_values(e64, e64 + 2.0, r64, "float32")[0] == "value"


def test_fuzz_repro_file_runs_on_its_own(tmp_path):
    import subprocess
    import sys

    from tracegrad.fuzz import generate
    from tracegrad.fuzz.runner import write_repro
    program = generate(3, 0, kind="graph")
    path = write_repro(program, [("llvm", "value:out", "(example)")], str(tmp_path))
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(tg.__file__))))
    p = subprocess.run([sys.executable, path], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "no difference" in p.stdout


def test_fuzz_command_line(tmp_path, capsys):
    from tracegrad.__main__ import main
    for start in (0, 2):
        assert main(["fuzz", "--n", "2", "--kind", "graph", "--seed", "7", "--start", str(start), "--out",
                     str(tmp_path), "--json", str(tmp_path / f"{start}.json")]) == 0
    assert "tracegrad fuzz: 2 programs (seed 7, from 2" in capsys.readouterr().out
    assert main(["fuzz", "--merge", str(tmp_path / "0.json"), str(tmp_path / "2.json")]) == 0
    assert "tracegrad fuzz: 4 programs (seed 7,7, from 0,2" in capsys.readouterr().out
    assert main(["fuzz", "--n", "1", "--backend", "nope"]) == 2
