"""The generated straight-line paths (backends/cpu/straight.py: a program's run; jit/callgen.py: an
entry's call and its backward's apply) do what the general methods do, for generated functions:
any number of inputs and outputs, a tensor argument used twice, arguments that need no gradient,
outputs that are tuples or dicts, layouts that need a contiguous copy; and they are the path a
plain signature takes, while signatures that need the general steps never get them.

Oracles: the general methods (Program.run, Entry.call, CompiledNode.apply_general) on the same
inputs, and eager tracegrad."""
import os
import weakref

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.backends.cpu.runtime import Program
from tracegrad.jit.entry import Entry

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "8"))

# elementwise and reducing steps combining a running value with one argument
STEPS = [lambda v, a: v * a, lambda v, a: (v + a).tanh(), lambda v, a: v - a.exp(),
         lambda v, a: v * a.sum(), lambda v, a: (v * a).sigmoid()]


def make_fn(steps, n_args, outputs):
    """A function of n_args tensors applying `steps` [(step, argument index)]; it returns the
    final value's sum, or a tuple/dict of (sum, the value, a mean)."""
    def fn(*args):
        v = args[0]
        for s, i in steps:
            v = STEPS[s](v, args[i % n_args])
        if outputs == "one":
            return v.sum()
        if outputs == "tuple":
            return v.sum(), v * 2.0, v.mean()
        return {"loss": v.sum(), "value": v}
    return fn


def leaves(n_args, rgs, layouts, same, dtype, seed):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_args):
        data = (rng.standard_normal((3, 5)) * 0.5).astype(dtype)
        t = tg.tensor(np.ascontiguousarray(data.T)).t() if layouts[i] else tg.tensor(data)
        out.append(t.requires_grad_(rgs[i]))
    if same and n_args > 1:
        out[1] = out[0]
    return out


def values(result):
    if isinstance(result, dict):
        return [result[k] for k in sorted(result)]
    return list(result) if isinstance(result, tuple) else [result]


def grads_after(result, args):
    loss = values(result)[0]
    if loss.requires_grad:
        loss.backward()
    return [None if a.grad is None else a.grad.numpy().copy() for a in args]


CASE = st.fixed_dictionaries({
    "steps": st.lists(st.tuples(st.integers(0, len(STEPS) - 1), st.integers(0, 3)), min_size=1, max_size=6),
    "n_args": st.integers(1, 3), "outputs": st.sampled_from(["one", "tuple", "dict"]),
    "rgs": st.tuples(st.booleans(), st.booleans(), st.booleans()),
    "layouts": st.tuples(st.booleans(), st.booleans(), st.booleans()),
    "same": st.booleans(), "dtype": st.sampled_from([np.float32, np.float64])})


@settings(max_examples=EXAMPLES, deadline=None)
@given(CASE)
def test_generated_paths_match_general_and_eager(case):
    fn = make_fn(case["steps"], case["n_args"], case["outputs"])
    f = tg.compile(fn)

    def run(call):
        args = leaves(case["n_args"], case["rgs"], case["layouts"], case["same"], case["dtype"], 7)
        res = call(args)
        return [v.detach().numpy().copy() for v in values(res)], grads_after(res, args), res
    eager_vals, eager_grads, _ = run(lambda args: fn(*args))
    f(*leaves(case["n_args"], case["rgs"], case["layouts"], case["same"], case["dtype"], 7))    # trace
    (entry,) = f.cache.values()
    assert entry.call_source is not None           # a plain signature takes the generated call
    if entry.run_bwd is not None:
        assert entry.apply_source is not None
    tol = dict(rtol=1e-5, atol=1e-6) if case["dtype"] == np.float32 else dict(rtol=1e-12, atol=1e-12)
    for call in (lambda args: f(*args),                                  # the generated call
                 lambda args: Entry.call(entry, tuple(args))):           # the general one
        for _ in range(2):                                               # the second reuses outputs
            vals, grads, res = run(call)
            for a, b in zip(vals, eager_vals):
                np.testing.assert_allclose(a, b, **tol)
            for a, b in zip(grads, eager_grads):
                assert (a is None) == (b is None)
                if a is not None:
                    np.testing.assert_allclose(a, b, **tol)
            assert [v.requires_grad for v in values(res)] == \
                [v.requires_grad for v in values(fn(*leaves(case["n_args"], case["rgs"], case["layouts"],
                                                            case["same"], case["dtype"], 7)))]


def test_general_apply_equals_generated_apply():
    f = tg.compile(lambda a, b: (a * b.tanh()).sum())
    a, b = tg.randn(4, 3, requires_grad=True), tg.randn(4, 3, requires_grad=True)
    f(a, b)
    (entry,) = f.cache.values()
    out = []
    for apply in (entry.apply, type(f(a, b).grad_fn).apply_general):
        loss = f(a, b)
        with tg.no_grad():
            out.append([g.numpy().copy() for g in apply(loss.grad_fn, [tg.ones(())])])
    for x, y in zip(*out):
        np.testing.assert_array_equal(x, y)


def test_program_straight_run_equals_general_run_and_recycles():
    f = tg.compile(lambda a: (a.exp() * 2.0).sum(dim=1))
    a = tg.randn(5, 7)
    f(a)
    prog = next(iter(f.cache.values())).programs[0]
    assert prog.run_source is not None
    arr = a.numpy()
    first = prog.run([arr])[0].copy()
    np.testing.assert_array_equal(first, Program.run(prog, [arr])[0])
    np.testing.assert_array_equal(first, prog.run([np.asfortranarray(arr)])[0])     # copied to row-major
    held = prog.run([arr])[0]
    again = prog.run([arr])[0]
    assert again is not held                     # a held output is never overwritten
    np.testing.assert_array_equal(held, first)
    ident = id(again)
    del again, held
    assert id(prog.run([arr])[0]) == ident       # nothing holds it: reused
    with pytest.raises(ValueError, match=r"expected float32\[5, 7\], got float64\[5, 7\]"):
        prog.run([arr.astype(np.float64)])


@pytest.mark.parametrize("how", ["check", "writes", "alias"])
def test_signatures_needing_general_steps_keep_them(how):
    a = tg.randn(3, 4)
    if how == "check":
        f = tg.compile(lambda a: a * 2.0, check=True)
    elif how == "writes":
        f = tg.compile(lambda a: a.mul_(2.0))
    else:
        f = tg.compile(lambda a: (a, a * 2.0))
    expected = [v.numpy().copy() for v in values(f.fn(a.clone()))]
    got = values(f(a))
    (entry,) = f.cache.values()
    assert entry.call_source is None
    for x, y in zip(got, expected):
        np.testing.assert_allclose(x.numpy(), y)


def test_native_segment_call_is_a_builtin_and_matches_ctypes(monkeypatch):
    """native_call.py: a segment called as a builtin (GIL released around it) and through ctypes (the
    fallback where the C API is not found) computes the same, and the builtin leaves no reference
    behind (it returns None with the reference it owes)."""
    import sys
    import types
    from tracegrad.backends.cpu import native_call

    f = tg.compile(lambda a: (a.exp() * 2.0).sum(dim=0))
    a = tg.randn(6, 4)
    expected = f(a).numpy().copy()
    prog = next(iter(f.cache.values())).programs[0]
    (step,) = prog.plan
    assert isinstance(step[1], types.BuiltinFunctionType)
    out = prog.run([a.numpy()])[0]
    before = sys.getrefcount(None)
    for _ in range(1000):
        out[...] = 0
        step[1]()
    assert sys.getrefcount(None) == before
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    monkeypatch.setattr(native_call, "_STATE", [None])      # as where the C API is not found: ctypes
    caller = native_call.segment_caller(prog.engine_ref.address("forward_s0"), prog.table)
    assert not isinstance(caller, types.BuiltinFunctionType)
    out[...] = 0
    caller()
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def _mlp(seed):
    tg.manual_seed(seed)
    return tg.nn.Sequential(tg.nn.Linear(5, 4), tg.nn.Tanh(), tg.nn.Linear(4, 2))


@pytest.mark.parametrize("frozen", [False, True])
def test_a_modules_captured_parameters_take_the_generated_call(frozen):
    """Parameters read through a module are captured inputs: the generated call reads their current
    arrays (p.data replaced between calls), builds the same node, and a training step matches eager
    and the general Entry.call, with a frozen layer's parameters getting no .grad."""
    x = tg.tensor(np.linspace(-1, 1, 15).reshape(3, 5), dtype=tg.float64)
    models = [_mlp(4).to(tg.float64) for _ in range(3)]
    for m in models:
        if frozen:
            m[0].weight.requires_grad_(False)
    compiled = tg.compile(lambda x: (models[0](x) ** 2).mean())
    general = tg.compile(lambda x: (models[1](x) ** 2).mean())
    compiled(x)
    general(x)
    (entry,) = compiled.cache.values()
    assert entry.call_source is not None and "C1._data" in entry.call_source
    (g_entry,) = general.cache.values()
    for step in range(3):
        losses = []
        for m, call in ((models[0], compiled), (models[1], lambda x: Entry.call(g_entry, (x,))),
                        (models[2], lambda x: (models[2](x) ** 2).mean())):
            for p in m.parameters():
                p.grad = None
            loss = call(x)
            loss.backward()
            losses.append(loss.item())
            with tg.no_grad():
                for p in m.parameters():
                    if p.grad is not None:
                        p.sub_(0.1 * p.grad)
            if step == 1:                     # a parameter's array replaced: read at the next call
                m[2].bias.data = m[2].bias.data + 0.5
        np.testing.assert_allclose(losses[:2], losses[2], rtol=1e-12)
        for ps in zip(*(m.parameters() for m in models)):
            assert len({p.grad is None for p in ps}) == 1
            for p in ps[:2]:
                np.testing.assert_allclose(p.detach().numpy(), ps[2].detach().numpy(), rtol=1e-12)
    assert (models[0][0].weight.grad is None) == frozen


def test_a_captured_parameter_changed_before_backward_raises_eagers_error():
    m = _mlp(1)
    f = tg.compile(lambda x: m(x).tanh().sum())
    x = tg.randn(3, 5)
    f(x)
    loss = f(x)
    with tg.no_grad():
        m[2].weight.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


@settings(max_examples=EXAMPLES * 3, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from(["keep", "drop", "replace", "release"])),
                min_size=1, max_size=12), st.integers(0, 1000), st.sampled_from([(3, 4), (256, 256)]))
def test_recycled_outputs_are_never_arrays_the_caller_holds(calls, seed, shape):
    """Calls through the generated and the general run, their results kept, dropped, replacing the
    last one kept (a .grad set anew each step) or releasing an older one: every result held keeps
    the values it was returned with, whatever later calls reuse (a small output and one of 256 KiB)."""
    f = tg.compile(lambda a, b: (a * b).tanh() + b)
    rng = np.random.default_rng(seed)
    a, b = tg.tensor(rng.standard_normal(shape).astype(np.float32)), tg.tensor(np.float32(0.5))
    f(a, b)
    prog = next(iter(f.cache.values())).programs[0]
    held = []
    for straight, what in calls:
        arr = rng.standard_normal(shape).astype(np.float32)
        out = (prog.run if straight else lambda x: Program.run(prog, x))([arr, b.numpy()])[0]
        want = np.tanh(arr * np.float32(0.5)) + np.float32(0.5)
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
        if what == "keep" or what == "replace" and not held:
            held.append((out, out.copy()))
        elif what == "replace":
            held[-1] = (out, out.copy())
        elif what == "release" and held:
            held.pop(0)
        del out
        for kept, value in held:
            np.testing.assert_array_equal(kept, value)


def test_a_result_replacing_the_previous_one_reuses_two_arrays():
    f = tg.compile(lambda a: a * 2.0)
    a = tg.randn(4, 4)
    f(a)
    prog = next(iter(f.cache.values())).programs[0]
    arr = a.numpy()
    for run in (prog.run, lambda x: Program.run(prog, x)):
        def array(out):                  # the array a result is (or views: reshaped)
            return out if out.base is None else out.base
        last, refs = run([arr])[0], []
        for i in range(8):
            refs.append(weakref.ref(array(last)))
            last = run([arr])[0]         # the previous result is still held while this call runs
            if i >= 2:                   # the one before it is reused, not a new array
                assert array(last) is refs[-2]()
