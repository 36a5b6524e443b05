"""Graph pictures: the eager autograd graph (ops, shapes, dtypes, values, .grad) and a compiled function's
IR stages with kernel boxes, as DOT that parses and names every node; rendering through Graphviz."""
import re
import shutil
import warnings
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.jit.introspect import fused_kernels
from tracegrad.viz.autograd_graph import summary
from tracegrad.viz.ir_graph import kernel_members

from dot_reader import Dot
from test_compile_fuzz import build, programs

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed "
                               "(Debian: apt-get install graphviz)")


def _mlp_loss(record):
    tg.manual_seed(0)
    x = tg.randn(4, 3)
    w = tg.randn(3, 5, requires_grad=True)
    b = tg.randn(5, requires_grad=True)
    if record:
        with tg.viz.record():
            loss = ((x @ w + b).relu() - 1.0).sum()
    else:
        loss = ((x @ w + b).relu() - 1.0).sum()
    return x, w, b, loss


def test_eager_graph_names_every_op_with_shape_dtype_and_value():
    x, w, b, loss = _mlp_loss(record=True)
    dot = Dot(str(tg.viz.draw(loss, names={"w": w, "b": b})))
    labels = list(dot.labels().values())
    heads = sorted(label.splitlines()[0] for label in labels)
    assert heads == sorted(["matmul", "add", "relu", "sub", "sum", "w (leaf)", "b (leaf)", "constant", "constant"])
    by_head = {label.splitlines()[0]: label.splitlines() for label in labels}
    h = x.numpy() @ w.detach().numpy() + b.detach().numpy()
    assert by_head["matmul"][1:] == ["(4, 5) float32", f"value: {summary(x.numpy() @ w.detach().numpy())}"]
    assert by_head["relu"][2] == f"value: {summary(np.maximum(h, 0))}"
    assert by_head["sum"][2] == f"value: {summary(loss.detach().numpy())}"
    assert by_head["w (leaf)"][3] == "grad: None"
    assert len(dot.edges) == 8 and all(a in dot.nodes and b in dot.nodes for a, b, _ in dot.edges)


def test_values_not_kept_by_the_graph_need_record():
    *_, loss = _mlp_loss(record=False)
    labels = Dot(str(tg.viz.draw(loss))).labels().values()
    # the constant 1.0 of the subtraction is not saved for backward, so neither it nor sub's value is known
    assert any(label.startswith("sub\n") and "value: not kept" in label for label in labels)
    assert any(label.startswith("relu\n") and "value: min" in label for label in labels)   # relu keeps its output


def test_leaf_grad_is_shown_after_backward():
    x, w, b, loss = _mlp_loss(record=True)
    loss.backward()
    labels = Dot(str(tg.viz.draw(loss, names={"b": b}))).labels().values()
    (label,) = [lb for lb in labels if lb.startswith("b (leaf)")]
    assert label.splitlines()[3] == f"grad: {summary(b.grad.numpy())}"


def test_summary_texts():
    assert summary(np.float32(2.5)) == "2.5"
    assert summary(np.array([1.0, 2.0])) == "[1, 2]"
    assert summary(np.arange(10.0)) == "min 0 mean 4.5 max 9"
    assert summary(np.array([True, False])) == "[True, False]"
    assert summary(np.zeros((0, 3))) == "empty"


def _f(x, w, b):
    h = (x @ w + b).relu()
    return (h - h.mean()).exp().sum()


def _compiled_args():
    tg.manual_seed(1)
    return tg.compile(_f), (tg.randn(4, 3), tg.randn(3, 5, requires_grad=True), tg.randn(5, requires_grad=True))


@pytest.mark.parametrize("stage", ["traced", "forward", "backward"])
def test_compiled_stage_names_every_ir_node(stage):
    f, args = _compiled_args()
    dot = Dot(str(f.draw(*args, stage=stage)))
    text = f.ir(*args, stage=stage)
    ops = re.findall(r"^  %(\w+): \S+ = (\w+)\(", text, re.M)
    labels = {label.split("\n")[0] for label in dot.labels().values()}
    for name, op in ops:
        assert f"%{name} = {op}" in labels, (name, op)
    header = re.match(r"graph \w+\((.*)\) \{", text).group(1)
    for inp in re.findall(r"%(\w+): (\w+\[[^\]]*\])", header):
        assert f"%{inp[0]}: {inp[1]}" in labels


def test_kernels_stage_draws_each_kernel_around_its_ops():
    f, args = _compiled_args()
    dot = Dot(str(f.draw(*args, stage="kernels")))
    listing = f.ir(*args, stage="kernels")
    parts = [p for p in dot.clusters if p.startswith("cluster_part")]
    assert [dot.clusters[p]["attrs"]["label"] for p in parts] == ["forward", "backward"]
    sections = re.split(r"^kernels .*$", listing, flags=re.M)[1:]
    for p, section in zip(parts, sections):
        listed = re.findall(r"^  (k\d+) \[(\w+)\] .* ops=(\S+)", section, re.M)
        boxes = {c: v for c, v in dot.clusters.items() if v["parent"] == p}
        assert len(boxes) == len(listed)
        for (k, kind, ops), (c, box) in zip(listed, boxes.items()):
            assert box["attrs"]["label"].startswith(f"{k} [{kind}]")
            drawn = {dot.nodes[n]["label"].split("\n")[0].split(" = ")[1] for n in box["nodes"]}
            assert drawn - {"const", "reshape", "expand", "permute", "slice"} <= set(ops.split("+")), (k, drawn, ops)
            assert drawn & set(ops.split("+"))


def test_draw_of_a_parsed_ir_graph():
    g = tg.ir.parse("graph g(%a: f32[3], %b: f32[3]) {\n  %0: f32[3] = mul(%a, %b)\n  return %0\n}")
    dot = Dot(str(tg.viz.draw(g)))
    assert {"%a: f32[3]", "%b: f32[3]", "%0 = mul\nf32[3]", "out 0"} <= set(dot.labels().values())


def test_unknown_stage_and_missing_backward():
    f, (x, w, b) = _compiled_args()
    with pytest.raises(ValueError, match="unknown stage 'llvm'"):
        f.draw(x, w, b, stage="llvm")
    with pytest.raises(ValueError, match="no backward graph"):
        f.draw(x, w.detach(), b.detach(), stage="backward")


def test_render_without_graphviz_names_the_package(tmp_path, monkeypatch):
    *_, loss = _mlp_loss(record=False)
    d = tg.viz.draw(loss)
    assert d.render(str(tmp_path / "g.dot")) and (tmp_path / "g.dot").read_text() == d.source + "\n"
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(tg.viz.GraphvizMissing, match="apt-get install graphviz"):
        d.render(str(tmp_path / "g.svg"))
    assert d._repr_svg_() is None
    with pytest.raises(ValueError, match="extension"):
        d.render(str(tmp_path / "noext"))


@needs_dot
def test_render_svg_and_png(tmp_path):
    f, args = _compiled_args()
    for d in (f.draw(*args, stage="kernels"), tg.viz.draw(_mlp_loss(record=True)[-1])):
        root = ET.parse(d.render(str(tmp_path / "g.svg"))).getroot()
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        titles = {t.text for t in root.iter("{http://www.w3.org/2000/svg}title")}
        assert set(Dot(d.source).nodes) <= titles
        assert ET.fromstring(d._repr_svg_()).tag.endswith("svg")
        assert (tmp_path / "g.png").exists() is False
        d.render(str(tmp_path / "g.png"))
        assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        (tmp_path / "g.png").unlink()


# ---------------------------------------------------------------- generated programs

VIEWS = {"reshape", "expand", "permute", "slice", "const"}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(prog=programs(), seed=st.integers(0, 2**16))
def test_every_op_is_drawn_in_a_kernel_that_computes_it(prog, seed):
    shapes, steps, outs = prog
    rng = np.random.default_rng(seed)
    args = [tg.tensor(rng.standard_normal(s), requires_grad=True) for s in shapes]
    f = tg.compile(build(steps, outs, len(shapes)), backend="interpret")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tg.BroadcastWarning)
        dot = Dot(str(f.draw(*args, stage="kernels")))
        entry = f._entry_for(tuple(args), {})[0]
    assert all(a in dot.nodes and b in dot.nodes for a, b, _ in dot.edges)
    for label, graph, kernels in fused_kernels(entry):
        member, _ = kernel_members(kernels)
        for n in graph.nodes:
            if n.op in VIEWS:
                continue
            assert id(n) in member, f"{label}: {n.op} is in no kernel"
            k = kernels[member[id(n)]]
            # read through gathers, selects, indices (ir/passes/gathers.py, copies.py)
            fused_index = n.op in ("index", "index_add", "iota", "unslice", "cat")
            assert n.op in k.ops() or k.node is n or fused_index, f"{label}: {n.op} drawn in a kernel of {k.ops()}"

