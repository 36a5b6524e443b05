"""Each optimization pass is a Graph -> Graph function: tested alone on parsed graphs, against the
interpreter (a pass never changes what a graph computes) and on the exact text it leaves."""
import numpy as np
import pytest

import tracegrad as tg
from tracegrad.ir import parse, print_graph, run, verify
from tracegrad.ir.passes import cse, dce, fold_constants, optimize, simplify


def body(g):
    """The op lines of a graph, without the header and closing brace."""
    return [l.strip() for l in print_graph(g, comments=False).splitlines()[1:-1]]


def same_results(g1, g2, seed=0):
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(v.shape).astype(v.dtype.np) for v in g1.inputs]
    for a, b in zip(run(g1, *args), run(g2, *args)):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)


def apply(p, text):
    g = verify(parse(text))
    before = print_graph(g)
    out = p(g)
    assert print_graph(g) == before, "a pass must not modify its input graph"
    verify(out)
    same_results(g, out)
    return out


# ---------------------------------------------------------------------- DCE

def test_dce_removes_unused_chain_and_keeps_inputs():
    g = apply(dce, """graph f(%x: f64[3], %y: f64[3]) {
  %0: f64[3] = exp(%x)
  %1: f64[3] = log(%0)
  %2: f64[3] = neg(%x)
  return %2
}""")
    assert body(g) == ["%0: f64[3] = neg(%x)", "return %0"]
    assert [v.name for v in g.inputs] == ["x", "y"]


def test_a_pass_that_changes_nothing_returns_its_graph():
    from tracegrad.ir.passes import PIPELINE
    g = optimize(parse("""graph f(%x: f64[4,3], %y: f64[3]) {
  %0: f64[4,3] = mul(%x, %y)
  %1: f64[4,3] = mul(%x, %y)
  %2: f64[4,3] = add(%0, %1)
  %3: f64[4] = sum(%2) {axis=(1,), keepdims=False}
  %4: f64[] = const() {value=1.0}
  %5: f64[4] = mul(%3, %4)
  return %5
}"""))
    assert len(g.nodes) == 3
    for p in PIPELINE:
        assert p(g) is g, p.__name__
    assert optimize(g) is g


def test_dce_keeps_everything_needed():
    text = """graph f(%x: f64[3]) {
  %0: f64[3] = exp(%x)
  %1: f64[3] = add(%0, %x)
  return %1, %0
}"""
    assert print_graph(apply(dce, text)) == print_graph(parse(text))


def test_dce_of_output_that_is_input():
    g = apply(dce, """graph f(%x: f64[3]) {
  %0: f64[3] = exp(%x)
  return %x
}""")
    assert body(g) == ["return %x"]


# ---------------------------------------------------------------------- CSE

def test_cse_merges_identical_nodes():
    g = apply(cse, """graph f(%x: f64[2,3]) {
  %0: f64[2,3] = exp(%x)
  %1: f64[2,3] = exp(%x)
  %2: f64[2] = sum(%0) {axis=(1,), keepdims=False}
  %3: f64[2] = sum(%1) {axis=(1,), keepdims=False}
  %4: f64[3] = sum(%1) {axis=(0,), keepdims=False}
  %5: f64[2] = add(%2, %3)
  return %5, %4
}""")
    assert body(g) == [
        "%0: f64[2,3] = exp(%x)",
        "%1: f64[2] = sum(%0) {axis=(1,), keepdims=False}",
        "%2: f64[3] = sum(%0) {axis=(0,), keepdims=False}",   # different attrs: not merged
        "%3: f64[2] = add(%1, %1)",
        "return %3, %2",
    ]


def test_cse_respects_operand_order_and_constants():
    g = apply(cse, """graph f(%x: f64[3], %y: f64[3]) {
  %0: f64[3] = sub(%x, %y)
  %1: f64[3] = sub(%y, %x)
  %2: f64[] = const() {value=2.0}
  %3: f64[] = const() {value=2.0}
  %4: f64[] = const() {value=3.0}
  %5: f64[3] = mul(%0, %2)
  %6: f64[3] = mul(%1, %3)
  %7: f64[3] = mul(%1, %4)
  return %5, %6, %7
}""")
    ops = body(g)
    assert sum("= sub(" in l for l in ops) == 2
    assert sum("= const(" in l for l in ops) == 2


def test_cse_never_merges_random_ops():
    text = """graph f() {
  %0: f64[4] = randn() {shape=(4,), dtype=f64}
  %1: f64[4] = randn() {shape=(4,), dtype=f64}
  %2: f64[4] = sub(%0, %1)
  return %2
}"""
    g = cse(parse(text))
    assert sum("randn" in l for l in body(g)) == 2


# ---------------------------------------------------------------------- simplification

@pytest.mark.parametrize("expr, kept", [
    ("mul(%x, %1)", True), ("mul(%1, %x)", True), ("add(%x, %n)", True), ("add(%n, %x)", True),
    ("sub(%x, %0)", True), ("div(%x, %1)", True),
    ("add(%x, %0)", False), ("add(%0, %x)", False), ("sub(%x, %n)", False),   # -0.0 + 0.0 is +0.0
])
def test_simplify_identities(expr, kept):
    g = apply(simplify, f"""graph f(%x: f64[2,3]) {{
  %0: f64[] = const() {{value=0.0}}
  %n: f64[] = const() {{value=-0.0}}
  %1: f64[] = const() {{value=1.0}}
  %2: f64[2,3] = {expr}
  return %2
}}""")
    assert (g.outputs[0] is g.inputs[0]) == kept
    assert (dce(g).nodes == []) == kept


def test_simplify_keeps_identities_that_change_the_type():
    # x + 0 where 0 broadcasts x to a bigger shape is not x
    g = apply(simplify, """graph f(%x: f64[3]) {
  %0: f64[2,3] = const() {value=0.0}
  %1: f64[2,3] = add(%x, %0)
  %2: f64[] = const() {value=1.0}
  %3: f64[3] = sub(%2, %x)
  return %1, %3
}""")
    assert "add(%x, %0)" in " ".join(body(g))
    assert "sub(" in " ".join(body(g))       # 1 - x is not x


def test_simplify_does_not_touch_zero_minus_x():
    g = apply(simplify, """graph f(%x: f64[3]) {
  %0: f64[] = const() {value=0.0}
  %1: f64[3] = sub(%0, %x)
  %2: f64[] = const() {value=1.0}
  %3: f64[3] = div(%2, %x)
  return %1, %3
}""")
    assert g.outputs[0] is not g.inputs[0] and g.outputs[1] is not g.inputs[0]


def test_simplify_double_negation():
    g = apply(simplify, """graph f(%x: f64[3]) {
  %0: f64[3] = neg(%x)
  %1: f64[3] = neg(%0)
  %2: f64[3] = neg(%1)
  return %1, %2
}""")
    assert g.outputs[0] is g.inputs[0]
    assert dce(g).nodes[-1].op == "neg" and len(dce(g).nodes) == 1


def test_simplify_reshape_of_reshape():
    g = dce(apply(simplify, """graph f(%x: f64[2,3,4]) {
  %0: f64[6,4] = reshape(%x) {shape=(6, 4)}
  %1: f64[4,6] = reshape(%0) {shape=(4, 6)}
  %2: f64[2,3,4] = reshape(%0) {shape=(2, 3, 4)}
  return %1, %2
}"""))
    assert body(g) == ["%0: f64[4,6] = reshape(%x) {shape=(4, 6)}", "return %0, %x"]


def test_simplify_transpose_of_transpose():
    g = dce(apply(simplify, """graph f(%x: f64[2,3,4]) {
  %0: f64[3,2,4] = permute(%x) {perm=(1, 0, 2)}
  %1: f64[2,3,4] = permute(%0) {perm=(1, 0, 2)}
  %2: f64[4,2,3] = permute(%0) {perm=(2, 1, 0)}
  %3: f64[2,3,4] = permute(%x) {perm=(0, 1, 2)}
  return %1, %2, %3
}"""))
    assert body(g) == ["%0: f64[4,2,3] = permute(%x) {perm=(2, 0, 1)}", "return %x, %0, %x"]


def test_simplify_broadcast_of_constant():
    g = apply(simplify, """graph f(%x: f64[2,3]) {
  %0: f64[] = const() {value=1.5}
  %1: f64[2,3] = expand(%0) {shape=(2, 3)}
  %2: f64[2,3] = mul(%x, %1)
  return %2
}""")
    g = dce(g)
    assert body(g) == ["%0: f64[2,3] = const() {value=1.5}", "%1: f64[2,3] = mul(%x, %0)", "return %1"]


def test_simplify_pow_and_where():
    g = dce(apply(simplify, """graph f(%x: f64[3], %y: f64[3]) {
  %0: f64[] = const() {value=1.0}
  %1: f64[3] = pow(%x, %0)
  %2: f64[] = const() {value=2.0}
  %3: f64[3] = pow(%x, %2)
  %4: bool[] = const() {value=False}
  %5: f64[3] = where(%4, %x, %y)
  %6: bool[] = const() {value=True}
  %7: f64[3] = where(%6, %x, %y)
  return %1, %3, %5, %7
}"""))
    assert body(g) == ["%0: f64[3] = mul(%x, %x)", "return %x, %0, %y, %x"]


def test_simplify_copy_and_same_dtype_cast():
    g = dce(apply(simplify, """graph f(%x: f64[3]) {
  %0: f64[3] = copy(%x)
  %1: f64[3] = cast(%0) {dtype=f64}
  %2: f32[3] = cast(%1) {dtype=f32}
  return %1, %2
}"""))
    assert body(g) == ["%0: f32[3] = cast(%x) {dtype=f32}", "return %x, %0"]


# ---------------------------------------------------------------------- constant folding

def test_fold_scalar_arithmetic():
    g = dce(apply(fold_constants, """graph f(%x: f64[3]) {
  %0: f64[] = const() {value=2.0}
  %1: f64[] = const() {value=3.0}
  %2: f64[] = mul(%0, %1)
  %3: f64[] = exp(%2)
  %4: f64[3] = add(%x, %3)
  return %4
}"""))
    assert body(g)[0] == f"%0: f64[] = const() {{value={float(np.exp(6.0))!r}}}"
    assert len(g.nodes) == 2


def test_fold_uniform_tensors_and_reductions():
    g = dce(apply(fold_constants, """graph f(%x: f64[2,3]) {
  %0: f64[2,3] = const() {value=0.5}
  %1: f64[2] = sum(%0) {axis=(1,), keepdims=False}
  %2: bool[2] = gt(%1, %1)
  %3: f64[2,1] = reshape(%1) {shape=(2, 1)}
  %4: f64[2,3] = mul(%x, %3)
  return %4, %2
}"""))
    assert body(g) == ["%0: bool[2] = const() {value=False}", "%1: f64[2,1] = const() {value=1.5}",
                       "%2: f64[2,3] = mul(%x, %1)", "return %2, %0"]


def test_fold_leaves_non_constants_and_random_alone():
    text = """graph f(%x: f64[3]) {
  %0: f64[] = const() {value=2.0}
  %1: f64[3] = mul(%x, %0)
  %2: f64[3] = randn() {shape=(3,), dtype=f64}
  return %1, %2
}"""
    g = fold_constants(parse(text))
    assert print_graph(g) == print_graph(parse(text))


def test_fold_nan_and_division_by_zero():
    g = dce(apply(fold_constants, """graph f(%x: f64[3]) {
  %0: f64[] = const() {value=0.0}
  %1: f64[] = div(%0, %0)
  %2: f64[] = const() {value=1.0}
  %3: f64[] = div(%2, %0)
  %4: f64[3] = add(%x, %3)
  return %1, %4
}"""))
    assert body(g)[0] == "%0: f64[] = const() {value=nan}"
    assert "value=inf" in body(g)[1]


# ---------------------------------------------------------------------- the pipeline

def test_optimize_reaches_a_fixed_point():
    g = parse("""graph f(%x: f64[2,3]) {
  %0: f64[] = const() {value=1.0}
  %1: f64[] = const() {value=-0.0}
  %2: f64[2,3] = mul(%x, %0)
  %3: f64[2,3] = add(%2, %1)
  %4: f64[2,3] = neg(%3)
  %5: f64[2,3] = neg(%4)
  %6: f64[3,2] = permute(%5) {perm=(1, 0)}
  %7: f64[2,3] = permute(%6) {perm=(1, 0)}
  %8: f64[6] = reshape(%7) {shape=(6,)}
  %9: f64[2,3] = reshape(%8) {shape=(2, 3)}
  %10: f64[2,3] = exp(%9)
  %11: f64[2,3] = exp(%x)
  %12: f64[2,3] = sub(%10, %11)
  %13: f64[] = add(%0, %0)
  %14: f64[2,3] = mul(%12, %13)
  return %14
}""")
    out = optimize(g)
    same_results(g, out)
    assert body(out) == ["%0: f64[2,3] = exp(%x)", "%1: f64[2,3] = sub(%0, %0)",
                         "%2: f64[] = const() {value=2.0}", "%3: f64[2,3] = mul(%1, %2)", "return %3"]
    assert print_graph(optimize(out)) == print_graph(out)


@pytest.mark.parametrize("p", [dce, cse, simplify, fold_constants, optimize])
def test_every_pass_preserves_the_spec_example(p):
    text = """graph step(%x: f32[32,784], %w: f32[784,128], %b: f32[128]) {
  %0: f32[32,128] = matmul(%x, %w)
  %1: f32[32,128] = add(%0, %b)
  %2: f32[32,128] = relu(%1)
  %3: f32[] = sum(%2) {axis=(0, 1), keepdims=False}
  return %3
}"""
    assert print_graph(p(parse(text))) == print_graph(parse(text))


def test_transposed_product_is_computed_in_the_transposed_layout():
    from tracegrad.ir.passes import simplify, dce
    g = parse("""graph t(%a: f32[3,4], %b: f32[4,5]) {
  %0: f32[3,5] = matmul(%a, %b)
  %1: f32[5,3] = permute(%0) {perm=(1, 0)}
  return %1
}""")
    out = dce(simplify(g))
    assert [n.op for n in out.nodes] == ["permute", "permute", "matmul"], str(out)
    a, b = np.random.rand(3, 4).astype(np.float32), np.random.rand(4, 5).astype(np.float32)
    np.testing.assert_allclose(run(out, a, b)[0], (a @ b).T, rtol=1e-6)
    # a product that is also used untransposed is left alone
    g2 = parse("""graph t(%a: f32[3,4], %b: f32[4,5]) {
  %0: f32[3,5] = matmul(%a, %b)
  %1: f32[5,3] = permute(%0) {perm=(1, 0)}
  return %1, %0
}""")
    assert [n.op for n in dce(simplify(g2)).nodes] == ["matmul", "permute"]


def _forward_outputs(f, *args):
    text = tg.compile(f, backend="interpret").ir(*args, stage="forward")
    return text.strip().splitlines()[-2].replace("; saved", ",")   # "return results, saved values"


def test_remat_recomputes_a_small_elementwise_chain_from_its_input():
    x = tg.randn(8, requires_grad=True)
    ret = _forward_outputs(lambda x: ((x * 0.5 + 0.1).tanh() * 1.5).exp().sum(), x)
    assert ret.replace("return", "").split(",")[1:] == [" %x"], ret     # only x is saved


def test_remat_saves_a_large_transcendental_and_a_many_input_residual():
    a = tg.randn(256, 512, requires_grad=True)
    ret = _forward_outputs(lambda a: (a * 2.0).tanh().sum(), a)
    assert "%a" not in ret.split(",")[1:] and len(ret.split(",")) == 2, ret   # tanh(2a) saved
    x, w, b, y = (tg.randn(5, requires_grad=r) for r in (False, True, True, False))
    ret = _forward_outputs(lambda x, w, b, y: ((x * w + b - y) ** 2).sum(), x, w, b, y)
    assert len(ret.split(",")) == 3, ret                                     # loss, residual, x


@pytest.mark.parametrize("check", [True, "each"])
def test_optimize_verifies_its_result(monkeypatch, check):
    """optimize() verifies the graph it returns (check=True) or the graph after every pass, naming
    the pass that broke it (check="each"): a pass that drops a node still in use is caught."""
    import tracegrad.ir.passes as passes
    from tracegrad.ir.verify import IRVerifyError

    def breaks(graph):
        if graph.nodes[0].op == "exp":
            graph.nodes = graph.nodes[1:]      # the first node's value is still used
        return graph
    monkeypatch.setattr(passes, "PIPELINE", (simplify, breaks))
    g = parse("""graph f(%x: f64[3]) {
  %0: f64[3] = exp(%x)
  %1: f64[3] = neg(%0)
  return %1
}""")
    with pytest.raises(IRVerifyError, match="after pass breaks" if check == "each" else "undefined value"):
        optimize(g, check=check)
