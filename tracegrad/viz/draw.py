"""`tg.viz.draw(x)`: the autograd graph behind an eager tensor (or an IR graph) as a Drawing."""
from .autograd_graph import AutogradGraph, summary
from .dot import Drawing, attrs
from .ir_graph import graph_dot

_FILL = {"op": "#ffffff", "leaf": "#e8f0fe", "const": "#eeeeee"}


def draw(root, names=None):
    """A Drawing of what `root` was computed from. For a Tensor: its autograd graph, one box per op
    (op name, shape, dtype, a short summary of the value), leaves (value and `.grad`) and constants
    (inputs needing no gradient); `names` maps labels to tensors, e.g. `dict(model.named_parameters())`.
    For an IR graph (`tg.ir.parse(text)`): its ops and values. `str(d)` is DOT text; `d.render("g.svg")`."""
    from ..ir.graph import Graph
    if isinstance(root, Graph):
        return draw_ir([(root.name, root, None)], root.name)
    g = AutogradGraph(root, names)
    lines = ["digraph autograd {", "  rankdir=BT;", '  node [shape=box, style="rounded,filled", '
             'fontname="Helvetica", fontsize=10];']
    ids = {b.key: f"b{k}" for k, b in enumerate(g.boxes)}
    for b in g.boxes:
        lines.append(f"  {ids[b.key]} {attrs(label=box_label(b), fillcolor=_FILL[b.kind], peripheries=2 if b.key == g.root_key else None)};")
    for b in g.boxes:
        for src, _ in b.inputs:
            lines.append(f"  {ids[src]} -> {ids[b.key]};")
    lines.append("}")
    return Drawing("\n".join(lines), "autograd")


def box_label(b, grad=True):
    """The text of a box: what it is, its type, its value, and (leaves) its .grad."""
    head = b.op if b.kind == "op" else (f"{b.name} (leaf)" if b.name and b.kind == "leaf" else
                                        b.name or ("leaf" if b.kind == "leaf" else "constant"))
    lines = [head, f"{b.shape} {str(b.dtype).replace('tracegrad.', '')}",
             f"value: {summary(b.value)}" if b.value is not None else "value: not kept"]
    if grad and b.kind == "leaf":
        lines.append(f"grad: {summary(b.grad)}" if b.grad is not None else "grad: None")
    return "\n".join(lines)


def draw_ir(parts, title):
    """A Drawing of IR graphs: `parts` is [(label, graph, kernels or None)]; with kernels (the fusion
    groups of `stage="kernels"`), each kernel is a box around the ops fused into it."""
    return Drawing(graph_dot(parts, title), title)

