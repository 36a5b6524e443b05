"""Which buffer slot holds each value of a compiled graph, for the programs of every backend (build.py
on the CPU, cuda/program.py on the device): the slots' numbering, outputs written into their inputs'
memory, and what each slot holds in a call."""
from ..ir.kernels import contiguous_strides, known, loads, same_shape


def per_graph(build, graphs, fused, inplace_pairs):
    """[build(graph, kernels, aliases, slots, inplace, label) or None] for each graph (None passes
    through). fused[g]: graph g's (kernels, aliases) as ir/passes/fusion.py's `fuse` returns them;
    inplace_pairs[g]: its (output index, input index) pairs that may share memory (see inplace_slots),
    `inplace` the slots that do; label: "forward", "backward", then "graph2", ..."""
    out = []
    for gi, g in enumerate(graphs):
        if g is None:
            out.append(None)
            continue
        kernels, aliases = fused[gi]
        slots = buffer_slots(g, kernels)
        inplace = inplace_slots(g, kernels, aliases, slots, inplace_pairs[gi] if inplace_pairs else ())
        out.append(build(g, kernels, aliases, slots, inplace, ("forward", "backward")[gi] if gi < 2 else f"graph{gi}"))
    return out


def roles(graph, kernels, aliases, slots, inplace):
    """What the slots hold in a call, as (fresh, temps, written, outputs, fresh_outputs):
    fresh [(slot, Value)]: outputs allocated by each call (handed to the caller);
    temps [(slot, Value)]: the intermediates, allocated once; the graph's inputs and the outputs
    written into them (`inplace`) are neither. written[j]: [(id(Value), slot)] of kernel j's outputs.
    outputs [(slot, shape or None)]: where each graph output is (an alias: its source's slot, so an
    output that is an input comes back as the input array) and the shape to view it as (None: its
    own). fresh_outputs: the positions of the outputs a call allocates (never an input's memory)."""
    values = {id(v): v for v in graph.inputs}
    values.update({id(v): v for k in kernels for v in k.outputs})
    out_ids = {id(v) for v in graph.outputs} | {id(b) for b in aliases.values()}
    in_ids = {id(v) for v in graph.inputs}
    fresh, temps = [], []
    for vid, slot in slots.items():
        if vid in in_ids or slot in inplace:
            continue
        (fresh if vid in out_ids else temps).append((slot, values[vid]))
    written = [[(id(v), slots[id(v)]) for v in k.outputs] for k in kernels]
    outputs = []
    for v in graph.outputs:
        src = aliases.get(id(v), v)
        outputs.append((slots[id(src)], v.shape if not same_shape(src.shape, v.shape) else None))
    fresh_slots = {slot for slot, _ in fresh}
    fresh_outputs = frozenset(j for j, (slot, _) in enumerate(outputs) if slot in fresh_slots)
    return fresh, temps, written, outputs, fresh_outputs


def buffer_slots(graph, kernels):
    """{id(Value): slot}: the graph's inputs, then each kernel's outputs, numbered in that order."""
    slots = {}
    for v in graph.inputs:
        slots.setdefault(id(v), len(slots))
    for k in kernels:
        for v in k.outputs:
            slots.setdefault(id(v), len(slots))
    return slots


def inplace_slots(graph, kernels, aliases, slots, pairs):
    """{slot of output: slot of input} for the (output index, input index) pairs — an updated
    parameter and the parameter — whose output a kernel can write straight into the input's
    memory. Safe when: a loop kernel computes the output in a map phase; every kernel that reads the
    input runs no later; inside that kernel the input is read only at the element being written,
    by phases up to the writing one, in phase order and in the order the phases run (a row kernel's
    walks may run a later phase first); the input is not itself an output (saved or returned); the
    output is returned once."""
    out = {}
    producer = {id(v): j for j, k in enumerate(kernels) for v in k.outputs}
    last_read = {}
    for j, k in enumerate(kernels):
        for ld in k.reads:
            last_read[id(ld.buf)] = j
    seen = {}                    # kernel index -> (writer phase of each output, phase ranks, loads of each buffer)
    returned = {}
    for v in graph.outputs:
        returned[id(v)] = returned.get(id(v), 0) + 1
    for oi, ii in pairs:
        v, u = graph.outputs[oi], graph.inputs[ii]
        j = producer.get(id(v))
        if j is None or id(v) in aliases or returned[id(v)] != 1 or id(u) in returned or not same_shape(v.shape, u.shape) \
                or v.dtype is not u.dtype:
            continue
        k = kernels[j]
        if k.kind != "loop" or not same_shape(k.shape, u.shape):
            continue
        if last_read.get(id(u), -1) > j:
            continue
        if j not in seen:
            reads = {}
            for p, ph in enumerate(k.phases):
                for _, tree in ph.outputs:
                    for ld in loads(tree):
                        reads.setdefault(id(ld.buf), []).append((p, ld))
            writers = {}
            for p, ph in enumerate(k.phases):
                for w, _ in ph.outputs:
                    writers.setdefault(id(w), p)
            seen[j] = writers, _phase_rank(k), reads
        writers, rank, reads = seen[j]
        writer = writers[id(v)]
        if k.phases[writer].kind != "map":
            continue
        if not any(p > writer or rank[p] > rank[writer] or not known(ld.offset, 0)
                   or not same_shape(ld.strides, contiguous_strides(u.shape))
                   for p, ld in reads.get(id(u), ())):
            out[slots[id(v)]] = slots[id(u)]
    return out


def _phase_rank(k):
    """Phase p's place in the order kernel k runs its phases, as (walk, p): a row kernel's walks
    over the row (Schedule.walks) run one after another, each running its phases per element in
    index order; without walks, phase by phase."""
    walks = k.schedule.walks if k.schedule is not None and k.schedule.walks else [[p] for p in range(len(k.phases))]
    return {p: (w, p) for w, group in enumerate(walks) for p in group}
