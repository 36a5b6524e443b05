"""A symbolic size read by Python (range, list repetition, NumPy shapes, int(), float(), number formats,
bool, comparisons) under tg.compile: each read either stays symbolic or records a guard, so a later size
never reuses an entry the read fixed. Compiled (dynamic=True and default) == eager, values and gradients,
across size sequences with 0 and 1. Before SymInt stopped being an int subclass, range(n) and
np.zeros(n) read the traced size with no guard and a later size got the traced size's answer."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tracegrad as tg
import tracegrad.nn as nn
from tracegrad import symint
from tracegrad.symint import ShapeEnv, using


def _rows(x):
    return x.shape[0]


READS = {
    # each: a function of x (n, 2) whose value depends on n through a Python-level read of the size
    "range": lambda x: tg.zeros(2) + sum(x[i] * (i + 1) for i in range(_rows(x))),
    "list_mul": lambda x: (x[:, 0] * tg.tensor([2.0] * _rows(x))).sum() + x.sum(),
    "np_zeros": lambda x: (x[:, 1] + tg.tensor(np.arange(_rows(x), dtype=np.float32))).sum(),
    "np_shape": lambda x: (x + tg.tensor(np.ones((_rows(x), 1), np.float32) * 3)).mean(0),
    "int": lambda x: x * int(_rows(x)) + x.reshape(int(_rows(x)) * 2).sum(),
    "float": lambda x: x.sum(0) / (float(_rows(x)) + 0.5),
    "fstring": lambda x: x * int(f"{_rows(x):d}") + len(f"{_rows(x)}"),
    "percent": lambda x: x * int("%d" % _rows(x)),
    "bool": lambda x: x.sum(0) * 3 if _rows(x) else x.sum(0) - 1,
    "compare": lambda x: x * 2 if _rows(x) > 3 else x - 1 if _rows(x) == 1 else x * -1,
    "slice_list": lambda x: x.sum() * len([1, 2, 3, 4, 5][:_rows(x)]),
    "dict_key": lambda x: x * {0: 1.0, 1: 2.0, 2: 3.0}.get(_rows(x), 5.0),
    "divide": lambda x: x * (_rows(x) / 4) + x * (_rows(x) // 2) + x * (_rows(x) % 3),
    "max": lambda x: x * max(_rows(x), 2) + x * min(_rows(x), 3),
}

sizes = st.lists(st.sampled_from([0, 1, 2, 3, 4, 6, 9]), min_size=2, max_size=6)


def _grad_of(f, xv):
    x = tg.tensor(xv, requires_grad=True)
    out = f(x)
    if not out.requires_grad:            # range over 0 rows: a constant, as eagerly
        return out.detach().numpy(), np.zeros_like(xv)
    (out * tg.tensor(np.linspace(0.5, 1.5, out.numel()).reshape(out.shape).astype(np.float32))).sum().backward()
    return out.detach().numpy(), (x.grad.numpy() if x.grad is not None else np.zeros_like(xv))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(READS)), st.sampled_from([None, True]), sizes)
def test_a_size_read_by_python_never_reuses_a_pinned_entry(name, dynamic, seq):
    f = READS[name]
    cf = tg.compile(f, backend="interpret", dynamic=dynamic)
    for i, n in enumerate(seq):
        xv = np.random.default_rng(i).standard_normal((n, 2)).astype(np.float32)
        want, want_grad = _grad_of(f, xv)
        got, got_grad = _grad_of(cf, xv)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{name} {seq} at n={n}")
        np.testing.assert_allclose(got_grad, want_grad, rtol=1e-5, atol=1e-5, err_msg=f"{name} grad at n={n}")
    assert cf.stats()["traces"] <= len(set(seq))


def test_range_over_a_symbolic_size_pins_it():
    cf = tg.compile(READS["range"], backend="interpret", dynamic=True)
    for n in (5, 3, 7):
        x = tg.tensor(np.arange(n * 2.0, dtype=np.float32).reshape(n, 2))
        np.testing.assert_allclose(cf(x).numpy(), READS["range"](x).numpy())
    s = cf.stats()
    assert s["traces"] == 3, s["retrace_reasons"]
    assert s["retrace_reasons"] == ["guard B == 5 failed (B = 3)", "guard B == 5 failed (B = 7)"]


@pytest.mark.parametrize("read, guard", [
    (lambda n: list(range(n)), "B == 4"), (lambda n: [0] * n, "B == 4"), (lambda n: np.zeros(n), "B == 4"),
    (lambda n: int(n), "B == 4"), (lambda n: float(n), "B == 4"), (lambda n: hash(n), "B == 4"),
    (lambda n: f"{n:d}", "B == 4"), (lambda n: "%d" % n, "B == 4"), (lambda n: bool(n), "B != 0"),
    (lambda n: n > 2, "B > 2"), (lambda n: [1, 2, 3, 4, 5][:n], "B == 4"),
    (lambda n: n & 1, "B == 4"), (lambda n: 1 << n, "B == 4"), (lambda n: n.bit_length(), "B == 4"),
    (lambda n: n < 4.5, "B < 5"), (lambda n: n >= 2.5, "B >= 3"), (lambda n: n == 4.5 or n != 2.5, None),
    (lambda n: n < float("inf"), None), (lambda n: 2 * n == 1 or 2 * n != 3, None),
])
def test_every_concrete_read_records_its_guard(read, guard):
    env = ShapeEnv()
    with using(env):
        n = env.sym("B", 4)
        read(n)
    assert [g.text for g in env.guards] == ([guard] if guard else [])


def test_symint_is_not_an_int():
    with using(ShapeEnv()):
        n = symint.sym("B", 4)
        assert not isinstance(n, int) and symint.is_size(n) and symint.is_size(3)
        assert not symint.is_size(True) and not symint.is_size(2.0)
        assert str(n * 2 + 1) == "2*B+1" and symint.hint(n * 2 + 1) == 9


@pytest.mark.parametrize("name", ["range", "np_zeros", "percent", "compare"])
def test_reads_under_llvm_match_eager(name):
    """The same reads through the LLVM backend: a size the read pinned traces apart, values and
    gradients == eager."""
    f = READS[name]
    cf = tg.compile(f, dynamic=True)
    for i, n in enumerate([4, 1, 6, 0, 4]):
        xv = np.random.default_rng(i).standard_normal((n, 2)).astype(np.float32)
        for got, want in zip(_grad_of(cf, xv), _grad_of(f, xv)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{name} at n={n}")


def _batch_norm():
    bn = nn.BatchNorm1d(4)        # one per caller: the running statistics are updated by each call
    return lambda x: bn(x) + bn.running_var


_gn = nn.GroupNorm(2, 4)
OWN = {        # tracegrad's own code reading a symbolic size: stays symbolic (no B == value guard)
    "stack": lambda x: tg.stack([x, x * 2], 0).sum(0),
    "var_std": lambda x: x.var(0) + x.std(1).sum(),
    "batch_norm": _batch_norm,
    "group_norm": lambda x: _gn(x),
    "eye": lambda x: tg.eye(x.shape[0]) @ x,
    "tensor_of_sizes": lambda x: x * tg.tensor([x.shape[0], 2.5, 1.0, 0.0]),
    "split_sizes": lambda x: x.split([x.shape[0] - 1, 1], 0)[0].sum(0),
    "repeat": lambda x: x.sum(0, keepdim=True).repeat(x.shape[0], 1) + x,
    "flip": lambda x: x.flip(0) * tg.arange(x.shape[0], 0, -1).unsqueeze(1),
    "roll": lambda x: x.roll(1, 0) * 2 + x.roll(-1, 0),
}


@pytest.mark.parametrize("name", sorted(OWN))
def test_own_code_keeps_sizes_symbolic(name):
    f, cf = OWN[name], OWN[name]
    if name == "batch_norm":
        f, cf = f(), f()
    cf = tg.compile(cf, backend="interpret", dynamic=True)
    for n in (5, 3, 7, 2):
        x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        for got, want in zip(_grad_of(cf, x), _grad_of(f, x)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{name} at n={n}")
    s = cf.stats()
    assert s["traces"] == 1, s["retrace_reasons"]
    assert not [g for d in s["dynamic"] for g in d["guards"] if g.startswith("B ==")], s["dynamic"]


def test_a_constant_modulo_a_larger_size_stays_symbolic():
    env = ShapeEnv()
    with using(env):
        n = env.sym("B", 5)
        assert (2 % n, 2 // n, str(-1 % n), -1 // n, str(-7 % n)) == (2, 0, "B-1", -1, "3")
    assert [g.text for g in env.guards] == ["B > 2", "B == 5"]      # B > 1 follows from B > 2
