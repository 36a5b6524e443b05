"""Every Python value a trace read is a guard, wherever it was read (issue 24, items 1-4 and 14):
globals read by helpers and by Module.forward, module attributes of every kind (functions, lists,
dicts, modules in plain lists, nested modules, config objects), closure cells, containers and
their items, SimpleNamespace and dataclass configs, NumPy arrays read as Python numbers, a plain
class's `self`; floats compared bit for bit (-0.0 is not 0.0, NaN does not retrace).

Oracle: the same function run eagerly after the same change; hypothesis draws which holder and
which kind of value changes, and when."""
import dataclasses
import math
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
import tracegrad.nn as nn

X = np.array([0.5, -1.5, 2.0], dtype=np.float32)

# globals read by helpers (set by each case before its first call)
K = 2.0
ACT = tg.tanh
TABLE = {"shift": 1.0}
SCALES = [2.0, 3.0]
PAIR = (tg.tensor([1.0, 2.0, 3.0]),)
CFG = types.SimpleNamespace(alpha=2.0)
ARR = np.array([1.0, 2.0])


@dataclasses.dataclass
class Config:
    beta: float = 2.0
    act: object = None


DC = Config()


def k_helper(t):
    return t * K


def act_helper(t):
    return ACT(t)


def deep_helper(t):
    return k_helper(t) + TABLE["shift"]


def make_scaled(s):
    cell = [s]

    def scaled(t):
        return t * cell[0]
    return scaled, cell


class Neg(nn.Module):
    def forward(self, t):
        return -t


class Holder(nn.Module):
    """A module whose forward reads an attribute of every kind and a global."""

    def __init__(self):
        super().__init__()
        self.act = tg.tanh
        self.scale = [2.0]
        self.table = {"shift": 1.0}
        self.subs = [nn.Identity()]
        self.inner = nn.Identity()
        self.cfg = types.SimpleNamespace(gain=1.0)
        self.w = tg.tensor([1.0, 2.0, 3.0])

    def forward(self, t):
        t = self.subs[0](self.act(t) * self.scale[0] + self.table["shift"])
        return self.inner(t) * self.cfg.gain * K + self.w


class Plain:
    """Not a Module: @tg.compile on its method reads `self` like a closure."""

    def __init__(self):
        self.w = tg.tensor([2.0, 3.0, 4.0])
        self.gain = 1.5
        self.opts = {"act": tg.tanh}

    @tg.compile
    def compiled(self, t):
        return self.opts["act"](t * self.w) * self.gain

    def eager(self, t):
        return self.opts["act"](t * self.w) * self.gain


def _set(name, value):
    globals()[name] = value


def case(kind):
    """(compiled function, eager function, [changes]) for one holder kind; each change mutates or
    rebinds what the function read."""
    global K, ACT, TABLE, SCALES, PAIR, CFG, ARR, DC
    K, ACT, TABLE, SCALES = 2.0, tg.tanh, {"shift": 1.0}, [2.0, 3.0]
    PAIR, CFG, ARR, DC = (tg.tensor([1.0, 2.0, 3.0]),), types.SimpleNamespace(alpha=2.0), np.array([1.0, 2.0]), \
        Config(act=tg.tanh)
    if kind == "helper global":
        fn = lambda t: k_helper(t) + 1          # noqa: E731
        return fn, [lambda: _set("K", 3.0), lambda: _set("K", -0.0), lambda: _set("K", 0.0)]
    if kind == "helper of helper":
        fn = lambda t: deep_helper(t)           # noqa: E731
        return fn, [lambda: _set("K", 5.0), lambda: TABLE.__setitem__("shift", 3.0), lambda: _set("TABLE", {"shift": 7.0})]
    if kind == "global function":
        fn = lambda t: act_helper(t)            # noqa: E731
        return fn, [lambda: _set("ACT", tg.relu), lambda: _set("ACT", tg.sigmoid)]
    if kind == "global list":
        fn = lambda t: t * SCALES[1]            # noqa: E731
        return fn, [lambda: SCALES.__setitem__(1, 9.0), lambda: SCALES.append(1.0), lambda: _set("SCALES", [0, 4.0])]
    if kind == "global tuple of tensors":
        fn = lambda t: t * PAIR[0]              # noqa: E731
        return fn, [lambda: _set("PAIR", (tg.tensor([5.0, 6.0, 7.0]),))]
    if kind == "namespace config":
        fn = lambda t: t * CFG.alpha            # noqa: E731
        return fn, [lambda: setattr(CFG, "alpha", 4.0), lambda: setattr(CFG, "alpha", float("nan"))]
    if kind == "dataclass config":
        fn = lambda t: DC.act(t) * DC.beta      # noqa: E731
        return fn, [lambda: setattr(DC, "beta", 4.0), lambda: setattr(DC, "act", tg.relu)]
    if kind == "numpy global":
        fn = lambda t: t * float(ARR.sum())     # noqa: E731
        return fn, [lambda: ARR.__setitem__(0, 10.0), lambda: _set("ARR", np.array([3.0, 3.0]))]
    if kind == "closure of a helper":
        scaled, cell = make_scaled(2.0)
        fn = lambda t: scaled(t)                # noqa: E731
        return fn, [lambda: cell.__setitem__(0, 6.0)]
    if kind == "class attribute":
        Holder.GAIN = 1.0
        m = Holder()
        fn = lambda t: m(t) * Holder.GAIN         # noqa: E731
        return fn, [lambda: setattr(Holder, "GAIN", -2.0), lambda: setattr(Holder, "GAIN", 4.0)]
    if kind == "tensor read as a number":
        w = tg.tensor([2.0])
        fn = lambda t: t * w.item() + w.tolist()[0]    # noqa: E731

        def bump():
            with tg.no_grad():
                w.add_(1.0)
        return fn, [bump, lambda: setattr(w, "data", tg.tensor([-1.0]))]
    m = Holder()
    if kind == "module attribute":
        return m, [lambda: setattr(m, "act", tg.relu), lambda: m.scale.__setitem__(0, 10.0),
                   lambda: m.table.__setitem__("shift", 3.0), lambda: setattr(m, "scale", [7.0]),
                   lambda: m.subs.__setitem__(0, Neg()), lambda: setattr(m.inner, "extra", 1),
                   lambda: setattr(m, "inner", Neg()), lambda: setattr(m.cfg, "gain", -2.0),
                   lambda: _set("K", 4.0)]
    raise AssertionError(kind)


KINDS = ["helper global", "helper of helper", "global function", "global list", "global tuple of tensors",
         "namespace config", "dataclass config", "numpy global", "closure of a helper", "module attribute",
         "class attribute", "tensor read as a number"]


def _bits(a):
    return np.asarray(a, dtype=np.float64).tobytes()


def _same(got, want):
    """Compiled tanh may differ from NumPy's in the last bit; a stale value differs by far more."""
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=0)


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(KINDS), picks=st.lists(st.integers(0, 8), min_size=1, max_size=4))
def test_a_change_to_what_the_trace_read_retraces(kind, picks):
    fn, changes = case(kind)
    f = tg.compile(fn)
    x = tg.tensor(X)
    _same(f(x).numpy(), fn(x).numpy())
    done = set()
    for p in picks:
        p %= len(changes)
        traces, reasons = f.stats()["traces"], len(f.stats()["retrace_reasons"])
        changes[p]()
        want = fn(x).numpy()
        _same(f(x).numpy(), want)
        now = f.stats()["traces"]
        if p not in done:                             # each change, first made, changes what was read
            assert now == traces + 1 and len(f.stats()["retrace_reasons"]) > reasons, (kind, p, f.stats())
        done.add(p)
        _same(f(x).numpy(), want)                     # the same world again: no retrace
        assert f.stats()["traces"] == now


def test_the_retrace_reason_names_what_changed():
    fn, changes = case("module attribute")
    f = tg.compile(fn)
    x = tg.tensor(X)
    f(x)
    changes[1]()                                       # m.scale[0] = 10
    f(x)
    assert any("scale[0]" in r and "10.0" in r for r in f.stats()["retrace_reasons"]), f.stats()
    fn, changes = case("helper global")
    f = tg.compile(fn)
    f(x)
    changes[0]()
    f(x)
    assert any("global K" in r for r in f.stats()["retrace_reasons"]), f.stats()


@settings(max_examples=40, deadline=None)
@given(a=st.floats(allow_nan=True, width=32), b=st.floats(allow_nan=True, width=32))
def test_numbers_are_the_same_value_bit_for_bit(a, b):
    """-0.0 after 0.0 (an argument or a closure) is a new signature; NaN is one signature."""
    f = tg.compile(lambda t, s: 1 / (t * s) + s)
    x = tg.tensor(X)
    for s in (a, b, a):
        assert _bits(f(x, s).numpy()) == _bits((1 / (x * s) + s).numpy())
    distinct = {np.float64(v).tobytes() if v == v else "nan" for v in (a, b)}
    assert f.stats()["traces"] == len(distinct), (a, b, f.stats())
    cell = [a]
    g = tg.compile(lambda t: 1 / (t * cell[0]))
    assert _bits(g(x).numpy()) == _bits((1 / (x * a)).numpy())
    cell[0] = b
    assert _bits(g(x).numpy()) == _bits((1 / (x * b)).numpy())


def test_nan_does_not_retrace_and_negative_zero_does():
    x = tg.tensor(X)
    f = tg.compile(lambda t, s: t + s)
    for _ in range(4):
        assert np.isnan(f(x, float("nan")).numpy()).all()
    assert f.stats()["traces"] == 1
    s = 0.0
    g = tg.compile(lambda t: 1 / (t * s))
    assert (g(x).numpy()[:1] > 0).all()
    s = -0.0
    assert (g(x).numpy()[:1] < 0).all()
    assert any("0.0 -> -0.0" in r for r in g.stats()["retrace_reasons"]), g.stats()


def test_a_method_of_a_plain_class_reads_self_like_a_closure():
    x = tg.tensor(X)
    a, b = Plain(), Plain()
    for obj in (a, b):
        _same(obj.compiled(x).numpy(), obj.eager(x).numpy())
    a.w = tg.tensor([-1.0, 0.5, 2.0])          # an attribute tensor replaced
    _same(a.compiled(x).numpy(), a.eager(x).numpy())
    with tg.no_grad():
        a.w.mul_(3.0)                           # its values: read at each call
    _same(a.compiled(x).numpy(), a.eager(x).numpy())
    a.gain = -1.0
    a.opts["act"] = tg.relu
    _same(a.compiled(x).numpy(), a.eager(x).numpy())
    _same(b.compiled(x).numpy(), b.eager(x).numpy())


def test_retrace_reasons_keep_the_latest_only():
    from tracegrad.jit.function import RETRACE_REASONS
    f = tg.compile(lambda t, n: t * n, cache_size=2)
    x = tg.tensor(X)
    with pytest.warns(RuntimeWarning):
        for n in range(RETRACE_REASONS + 50):
            f(x, n)
    reasons = f.stats()["retrace_reasons"]
    assert len(reasons) == RETRACE_REASONS
    assert reasons[-1] == f"n: value {RETRACE_REASONS + 48} -> {RETRACE_REASONS + 49}", reasons[-1]


def test_a_global_read_while_a_python_profiler_runs_is_still_guarded():
    import sys
    global K
    K = 2.0
    calls = []
    sys.setprofile(lambda frame, event, arg: calls.append(event))
    try:
        f = tg.compile(lambda t: k_helper(t))
        x = tg.tensor(X)
        f(x)
    finally:
        sys.setprofile(None)
    assert calls                                # the user's profiler kept running
    K = 3.0
    np.testing.assert_array_equal(f(x).numpy(), (x * 3.0).numpy())
    assert math.isclose(float(f(x).numpy()[0]), 1.5)


def test_an_attribute_of_a_users_module_and_of_a_class_read_through_self(tmp_path, monkeypatch):
    (tmp_path / "tg_guard_cfg.py").write_text("LR = 2.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import tg_guard_cfg

    class Scaled(nn.Module):
        SCALE = 2.0

        def forward(self, t):
            return t * self.SCALE * tg_guard_cfg.LR
    m = Scaled()
    f = tg.compile(m)
    x = tg.tensor(X)
    _same(f(x).numpy(), m(x).numpy())
    Scaled.SCALE = 5.0
    _same(f(x).numpy(), m(x).numpy())
    tg_guard_cfg.LR = -1.0
    _same(f(x).numpy(), m(x).numpy())
    assert any("tg_guard_cfg.LR: 2.0 -> -1.0" in r for r in f.stats()["retrace_reasons"]), f.stats()
    assert f.stats()["traces"] == 3


def test_what_the_guards_cannot_see_is_said():
    """A C-level profiler holds the hook: a warning says helpers' globals are not guarded. A value
    too large to walk: a warning names it."""
    import cProfile
    x = tg.tensor(X)
    prof = cProfile.Profile()
    prof.enable()
    try:
        with pytest.warns(RuntimeWarning, match="C-level profiler"):
            tg.compile(lambda t: k_helper(t))(x)
    finally:
        prof.disable()
    big = list(range(5000))
    with pytest.warns(RuntimeWarning, match="big"):
        tg.compile(lambda t: t * big[1])(x)


def test_of_a_users_module_only_the_attributes_code_loads_are_guarded(tmp_path, monkeypatch):
    """A module of the user's held in a closure: a change to an attribute the code reads retraces;
    a counter the module also holds, which no code that ran reads, does not."""
    (tmp_path / "tg_guard_lib.py").write_text("SCALE = 2.0\nCALLS = 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import tg_guard_lib as lib

    f = tg.compile(lambda t: t * lib.SCALE)
    x = tg.tensor(X)
    f(x)
    for _ in range(3):
        lib.CALLS += 1
        _same(f(x).numpy(), X * 2.0)
    assert f.stats()["traces"] == 1
    lib.SCALE = -3.0
    _same(f(x).numpy(), X * -3.0)
    assert f.stats()["traces"] == 2 and "lib.SCALE: 2.0 -> -3.0" in f.stats()["retrace_reasons"][-1]
