"""tracegrad.symint: arithmetic agrees with ints under any binding; every decision is provable over the
ranges or recorded as a guard that holds under the hints; ShapeEnv.check names the failing guard."""
import operator

import pytest
from hypothesis import given, settings, strategies as st

from tracegrad.symint import (Expr, ShapeEnv, SymInt, evaluate, free_symbols, hint, is_sym, parse_expr,
                              substitute, sym, using)

NAMES = ["B", "T", "S2"]
_ARITH = [operator.add, operator.sub, operator.mul]
_CMP = [operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge]


@st.composite
def programs(draw):
    """A random expression tree over the symbols and small constants, as a list of steps."""
    steps = []
    for _ in range(draw(st.integers(1, 6))):
        steps.append((draw(st.sampled_from(_ARITH + ["floordiv", "mod", "pow"])),
                      draw(st.integers(0, 20)), draw(st.integers(-3, 5)), draw(st.integers(1, 4))))
    return steps


def _run(steps, values):
    """Evaluate the program on `values` (ints or SymInts): a list of every intermediate value."""
    vals = list(values)
    for op, i, c, d in steps:
        a, b = vals[i % len(vals)], vals[(i + 1) % len(vals)]
        if op == "floordiv":
            out = a // d
        elif op == "mod":
            out = a % d
        elif op == "pow":
            out = a ** (d % 3)
        elif c % 2:
            out = op(a, c)
        else:
            out = op(a, b)
        vals.append(out)
    return vals


@settings(max_examples=200, deadline=None)
@given(programs(), st.lists(st.integers(0, 50), min_size=3, max_size=3),
       st.lists(st.integers(0, 50), min_size=3, max_size=3))
def test_arithmetic_agrees_with_ints_and_guards_hold(steps, hints, other):
    env = ShapeEnv()
    with using(env):
        syms = [sym(n, h, source=("x", k)) for k, (n, h) in enumerate(zip(NAMES, hints))]
        symbolic = _run(steps, syms)
    plain = _run(steps, hints)
    # under the hints: the same values
    assert [hint(v) for v in symbolic] == plain
    bound = dict(zip(NAMES, hints))
    assert all(g.holds(bound) for g in env.guards)
    # under another binding where every guard holds, the expressions give what ints give
    binding = dict(zip(NAMES, other))
    if env.check(binding) is None:
        assert [evaluate(v, binding) for v in symbolic] == _run(steps, other)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(_CMP), st.integers(0, 40), st.integers(-3, 3), st.integers(-5, 45),
       st.integers(0, 40), st.integers(0, 40))
def test_every_decision_is_provable_or_guarded(cmp, hb, k, c, ht, other):
    """A comparison's answer under any binding that passes the guards equals its answer under the hint."""
    env = ShapeEnv()
    with using(env):
        B, T = sym("B", hb), sym("T", ht)
        lhs = B * k + T if k % 2 else B - T * k
        answer = cmp(lhs, c)
    assert answer == cmp(hint(lhs), c)
    for b in range(0, 45, 3):
        binding = {"B": b, "T": other}
        if env.check(binding) is None:
            assert cmp(evaluate(lhs, binding), c) == answer, (env.guards, binding)


def test_provable_decisions_record_nothing():
    env = ShapeEnv()
    with using(env):
        B, T = sym("B", 64), sym("T", 8)
        assert B * T == T * B and B >= 0 and B + 1 > 0 and not (B + 1 == 0) and B * T + 1 != 0
        assert (B * T) // T == B        # exact division by a positive term: one guard T > 0
    assert [g.text for g in env.guards] == ["T > 0"]


def test_guard_texts_and_check_names_the_failing_guard():
    env = ShapeEnv()
    with using(env):
        B = sym("B", 64, source=("x", 0))
        T = sym("T", 8, source=("x", 1))
        assert not B == 1
        assert B > 2
        assert not T > 64
        assert B != T
    assert [g.text for g in env.guards] == ["B != 1", "B > 2", "T <= 64", "B != T"]
    assert env.bind({"x": (17, 3)}) == {"B": 17, "T": 3}
    assert env.check({"B": 17, "T": 3}) is None
    assert env.check({"B": 1, "T": 3}) == "B != 1 failed (B = 1)"
    assert env.check({"B": 17, "T": 65}) == "T <= 64 failed (T = 65)"
    assert env.check({"B": 9, "T": 9}) == "B != T failed (B = 9, T = 9)"


def test_concretizing_specializes():
    env = ShapeEnv()
    with using(env):
        B = sym("B", 64)
        T = sym("T", 8)
        assert int(B) == 64 and type(int(B)) is int
        assert float(T) == 8.0
        assert f"{B}" == "B" and f"{B:d}" == "64"
    assert [g.text for g in env.guards] == ["B == 64", "T == 8"]
    assert env.check({"B": 64, "T": 9}) == "T == 8 failed (T = 9)"


def test_hash_meets_ints_and_equality_records():
    env = ShapeEnv()
    with using(env):
        B = sym("B", 64)
        assert {64: "a"}[B] == "a"
    assert "B == 64" in [g.text for g in env.guards]


def test_no_env_raises_for_a_real_decision_only():
    env = ShapeEnv()
    with using(env):
        B = sym("B", 3)
    assert B >= 0 and B * 2 - B == B          # provable: no env needed
    with pytest.raises(RuntimeError, match=r"B != 1.*outside any ShapeEnv"):
        bool(B == 1)


def test_printing_and_parsing_round_trip():
    env = ShapeEnv()
    with using(env):
        B, T = sym("B", 4), sym("T", 5)
        for d in [B, B * T + 1, T - 1, 2 * B, 3 - B, B * B * T - 2 * T + 7, -B]:
            assert is_sym(d)
            assert parse_expr(str(d)) == d.expr
            assert str(parse_expr(str(d))) == str(d)
        assert str(B * T + 1) == "B*T+1" and str(T - 1) == "T-1" and str(2 * B) == "2*B"
        assert free_symbols((B, 3, T * 2)) == {"B", "T"}
        assert substitute((B, 3, B * T), {"B": 2, "T": 7}) == (2, 3, 14)
        assert B - B == 0 and type(B - B) is int and type(B * 0) is int
    assert isinstance(B, SymInt) and isinstance(B.expr, Expr)


def test_ranges_narrow_with_guards():
    env = ShapeEnv()
    with using(env):
        B = sym("B", 5)
        assert B != 0                   # recorded: B could be 0
        assert B > 0                    # now provable from the guard above
    assert [g.text for g in env.guards] == ["B != 0"]
