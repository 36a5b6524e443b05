"""The IR text format of SPEC §5: one op per line, deterministic numbering, typed values."""
from ..dtypes import DType
from ..symint import same_shape


def fmt_attr(v):
    if isinstance(v, DType):
        return v.short
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, tuple):
        inner = ", ".join(fmt_attr(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    return repr(v)


def names(graph):
    """Value id -> printed name: inputs keep their names, nodes are numbered in order."""
    out = {id(v): v.name for v in graph.inputs}
    for i, n in enumerate(graph.nodes):
        out[id(n.out)] = str(i)
    return out


def referrer(graph):
    """v -> "%name" in `graph` (values it does not define print as undefined: bad graphs print too)."""
    nm = names(graph)
    return lambda v: "%" + nm.get(id(v), f"<undefined {v.name or v.type}>")


def node_line(n, ref, source=False, comments=True):
    """One node's line of the text format."""
    text = f"  {ref(n.out)}: {n.out.type} = {n.op}({', '.join(ref(i) for i in n.inputs)})"
    if n.attrs:
        text += " {" + ", ".join(f"{k}={fmt_attr(v)}" for k, v in n.attrs.items()) + "}"
    notes = []
    if comments:
        notes += [f"{ref(i)} broadcast [{','.join(map(str, i.shape))}] -> [{','.join(map(str, n.out.shape))}]"
                  for i in n.inputs if _stretched(n, i)]
    if source and n.loc:
        notes.append(n.loc)
    if notes:
        text = f"{text:<44} # " + "; ".join(notes)
    return text


def print_graph(graph, source=False, comments=True):
    ref = referrer(graph)
    header = ", ".join(f"{ref(v)}: {v.type}" for v in graph.inputs)
    lines = [f"graph {graph.name}({header}) {{"]
    for n in graph.nodes:
        lines.append(node_line(n, ref, source, comments))
    cut = len(graph.outputs) - graph.n_saved
    results, saved = graph.outputs[:cut], graph.outputs[cut:]
    line = "  return" + (" " + ", ".join(ref(v) for v in results) if results else "")
    if saved:           # a forward graph: the values it saves for the backward graph, apart
        line += "; saved " + ", ".join(ref(v) for v in saved)
    if graph.grads_of is not None and len(graph.grads_of) == len(graph.outputs):     # a backward graph
        line = f"{line:<44} # grads of: " + ", ".join(graph.grads_of)
    lines.append(line)
    lines.append("}")
    return "\n".join(lines)


def _stretched(node, v):
    from ..ops import PRIMS
    p = PRIMS.get(node.op)
    return p is not None and p.kind == "elementwise" and not same_shape(v.shape, node.out.shape) and v.shape != ()
