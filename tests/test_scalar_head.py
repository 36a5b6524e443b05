"""scalar.head: the vocabulary function of an expression that applies it to the operands in order, found
once when the Call is made (the scheduler and code generators ask it of every node, many times)."""
from hypothesis import given, settings, strategies as st

from tracegrad import scalar as S


def _expr(draw, depth):
    kind = draw(st.sampled_from(["arg", "lit", "call"] if depth else ["arg", "lit"]))
    if kind == "arg":
        return S.ARGS[draw(st.integers(0, 2))]
    if kind == "lit":
        return S.Lit(draw(st.integers(-3, 3)))
    fn = draw(st.sampled_from(sorted(S.FUNCS.values(), key=lambda f: f.name)))
    return S.Call(fn, tuple(_expr(draw, depth - 1) for _ in range(fn.arity)))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_head_is_the_function_applied_to_the_operands_in_order(data):
    e = _expr(data.draw, 2)
    in_order = isinstance(e, S.Call) and all(isinstance(x, S.Arg) and x.index == i for i, x in enumerate(e.args))
    assert S.head(e) is (e.fn if in_order else None)
    for x in S.walk(e):         # every node, and the vocabulary's own expressions
        want = x.fn if isinstance(x, S.Call) and all(isinstance(y, S.Arg) and y.index == i
                                                     for i, y in enumerate(x.args)) else None
        assert S.head(x) is want
    assert S.head(S.Call(S.FUNCS["add"], (S.a, S.b))) is S.FUNCS["add"]
    assert S.head(S.Call(S.FUNCS["add"], (S.b, S.a))) is None
