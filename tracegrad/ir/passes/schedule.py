"""Scheduling: choose how each kernel of the kernel IR walks memory, between fusion and lowering.

Fusion builds loop nests in the *logical* order of a kernel's space; a transposed or permuted
operand then walks memory with a large stride in the innermost loop. This pass looks at the
strides of a kernel's largest operands (loads, and the outputs it writes) and sets
`kernel.schedule` (ir/kernels.py's Schedule) when natural order is not the memory order:

- map kernels and reduce_acc kernels: loop order = the largest operand's axes by stride,
  largest outermost, its unit-stride axis innermost (a permuted view iterates in storage order;
  the outermost loop, which threads split, then gives each thread a contiguous slab);
- map kernels whose largest operands disagree on the unit-stride axis (a 2-D transpose): tile
  both axes by TILE so that the tile's reads and writes both stay in cache;
- row-reduction kernels whose largest input's unit-stride axis is a kept one (a sum or softmax
  over a transposed view's rows = over columns of memory): reduce *across* the kept axis, a
  vector of ACROSS_TILE partial results per tile while the rows stream by (threads split the
  tiles).

Kernels already in memory order keep `schedule = None` and lower exactly as before.
"""
from ..kernels import Schedule, contiguous_strides, nbytes

TILE = 32            # elements per side of a transpose tile (32 x 32 float32: 4 KiB)
ACROSS_TILE = 256    # kept-axis elements per vector of partial results (1 KiB of float32)
HEAVY = 0.5          # operands at least this fraction of the largest one's bytes decide the order


def schedule(kernels):
    """Set `schedule` on every loop and reduce_acc kernel of `kernels` (in place); returns them."""
    for k in kernels:
        if k.kind in ("loop", "reduce_acc") and len(k.shape) > 1:
            k.schedule = choose(k)
    return kernels


def operands(k):
    """[(bytes, strides over k's space)] of the buffers k writes, then of those it reads (an
    output comes first among equals: contiguous stores matter more than loads)."""
    out = []
    full = contiguous_strides(k.shape)
    for ph in k.phases:
        for v, _ in ph.outputs:
            if ph.kind == "map":
                out.append((nbytes(v), full))
            else:
                kept = [d for d in range(len(k.shape)) if d not in _reduced(k, ph)]
                strides = [0] * len(k.shape)
                for d, s in zip(kept, contiguous_strides([k.shape[d] for d in kept])):
                    strides[d] = s
                out.append((nbytes(v), tuple(strides)))
    return out + [(nbytes(ld.buf), ld.strides) for ld in k.reads]


def _reduced(k, ph):
    return set(ph.axes) if k.kind == "reduce_acc" else set(range(k.split, len(k.shape)))


def unit_axis(shape, strides):
    """The axis an operand walks fastest: the smallest nonzero |stride| among axes longer than 1."""
    best = None
    for d, (n, s) in enumerate(zip(shape, strides)):
        if n > 1 and s and (best is None or abs(s) <= abs(strides[best])):
            best = d
    return best


def memory_order(shape, strides):
    """Axes by |stride| of one operand, largest first (ties and broadcast axes keep logical order)."""
    return sorted(range(len(shape)), key=lambda d: (-abs(strides[d]) if shape[d] > 1 else 0, d))


def choose(k):
    """The Schedule of one kernel, or None when natural order already walks memory in order."""
    ops = [(b, st) for b, st in operands(k) if unit_axis(k.shape, st) is not None]
    if not ops:
        return None
    big = max(b for b, _ in ops)
    heavy = sorted((o for o in ops if o[0] >= HEAVY * big), key=lambda o: -o[0])
    lead = heavy[0][1]
    order = memory_order(k.shape, lead)
    units = []
    for _, st in heavy:
        u = unit_axis(k.shape, st)
        if u not in units:
            units.append(u)
    if k.kind == "loop" and any(ph.kind == "reduce" for ph in k.phases):
        # The phases stream the *inputs* once each: their layout decides. A map phase's output
        # written across the kept axis touches one cache line per tile column, refilled over the
        # next rows: a tile's lines stay in L1.
        reduced = set(range(k.split, len(k.shape)))
        reads = [(nbytes(ld.buf), ld.strides) for ld in k.reads if unit_axis(k.shape, ld.strides) is not None]
        src = max(reads, key=lambda o: o[0])[1] if reads else lead
        u = unit_axis(k.shape, src)
        if u in reduced:
            return None
        order = memory_order(k.shape, src)
        kept = [d for d in order if d not in reduced and d != u]
        last = len(k.shape) - 1                              # a map phase's unit-stride axis
        maps = any(ph.kind == "map" for ph in k.phases)
        return Schedule([(d, 0) for d in kept] + [(u, ACROSS_TILE)] + [(d, 0) for d in order if d in reduced]
                        + [(u, 0)], across=u,
                        map_levels=[(d, 0) for d in order if d in reduced and d != last]
                        + [(last, TILE), (u, 0), (last, 0)] if maps else None)
    if k.kind == "loop" and len(units) > 1:                  # a transpose: tile the two unit axes
        a, b = units[1], units[0]                            # the largest operand's unit axis innermost
        outer = [(d, 0) for d in order if d not in (a, b)]
        return Schedule(outer + [(a, TILE), (b, TILE), (a, 0), (b, 0)])
    if tuple(order) == tuple(range(len(k.shape))):
        return None
    return Schedule([(d, 0) for d in order])
