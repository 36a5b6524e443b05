"""IR graphs as DOT: inputs, one box per op (name, type, attributes), outputs, and optionally each fused
kernel drawn as a cluster around the ops it computes."""
from ..ir.printer import fmt_attr, names
from .dot import attrs, quote


def kernel_members(kernels):
    """({id(node): kernel index}, {kernel index: [nodes it recomputes]}): the ops each kernel computes. From each kernel output, walk back through
    the graph until a buffer the kernel reads (a graph input or another kernel's output); views and
    elementwise ops on the way are fused into it. A small value recomputed by several kernels belongs
    to the first; the later ones list it as recomputed."""
    member, again = {}, {}
    for j, k in enumerate(kernels):
        if k.node is not None:                      # extern (matmul) and host kernels: one op each
            member.setdefault(id(k.node), j)
            continue
        outs = {id(v) for v in k.outputs}
        reads = {id(ld.buf) for ld in k.reads} - outs
        stack, seen = list(k.outputs), set()
        while stack:
            v = stack.pop()
            if id(v) in seen or v.node is None:
                continue
            seen.add(id(v))
            if member.setdefault(id(v.node), j) != j:
                again.setdefault(j, []).append(v.node)
            stack.extend(i for i in v.node.inputs if id(i) not in reads)
    return member, again


def graph_dot(parts, title):
    """DOT for [(label, graph, kernels or None)]: one cluster per part when there are several."""
    lines = [f"digraph {quote(title)} {{", "  rankdir=TB;", '  graph [fontname="Helvetica", fontsize=11];', '  node [fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=8];']
    for p, (label, graph, kernels) in enumerate(parts):
        pad = "  "
        if len(parts) > 1:
            lines.append(f"  subgraph cluster_part{p} {{")
            lines.append(f"    label={quote(label)}; style=dashed;")
            pad = "    "
        lines += [pad + line for line in _graph_lines(graph, kernels, f"p{p}")]
        if len(parts) > 1:
            lines.append("  }")
    lines.append("}")
    return "\n".join(lines)


def _graph_lines(graph, kernels, prefix):
    nm = names(graph)
    node_id = {}

    def vid(v):
        return node_id.setdefault(id(v), f"{prefix}_v{len(node_id)}")

    lines = []
    for v in graph.inputs:
        lines.append(f"{vid(v)} {attrs(shape='box', style='filled', fillcolor='#e8f0fe', label=f'%{nm[id(v)]}: {v.type}')};")
    member, again = kernel_members(kernels) if kernels is not None else ({}, {})
    order = {n: k for k, n in enumerate(graph.nodes)}
    boxes = {}
    for n in graph.nodes:
        attr_text = " ".join(f"{k}={fmt_attr(a)}" for k, a in n.attrs.items() if k != "value")
        if n.op == "const":
            attr_text = f"value={_short(n.attrs.get('value'))}"
        label = f"%{nm[id(n.out)]} = {n.op}\n{n.out.type}" + (f"\n{attr_text}" if attr_text else "")
        line = f"{vid(n.out)} {attrs(shape='box', style='rounded', label=label)};"
        boxes.setdefault(member.get(id(n)), []).append(line)
    lines += boxes.pop(None, [])
    for j in sorted(boxes):
        k = kernels[j]
        space = "x".join(map(str, k.shape)) or "scalar"
        label = f"k{j} [{k.kind}] space={space}  {k.bytes_moved()} bytes"
        if again.get(j):
            label += "\nalso recomputes " + " ".join(f"%{nm[id(n.out)]}" for n in sorted(again[j], key=order.get))
        lines.append(f"subgraph cluster_{prefix}_k{j} {{")
        lines.append(f"  label={quote(label)}; "
                     f'style="rounded,filled"; fillcolor="#fff7e0"; color="#d09000";')
        lines += ["  " + line for line in boxes[j]]
        lines.append("}")
    for n in graph.nodes:
        for i in n.inputs:
            lines.append(f"{vid(i)} -> {vid(n.out)} {attrs(label=i.type)};")
    for k, v in enumerate(graph.outputs):
        lines.append(f"{prefix}_out{k} {attrs(shape='doublecircle', label=f'out {k}')};")
        lines.append(f"{vid(v)} -> {prefix}_out{k};")
    return lines


def _short(value, limit=24):
    text = fmt_attr(value) if not hasattr(value, "shape") else f"array{tuple(value.shape)}"
    return text if len(text) <= limit else text[:limit - 3] + "..."
