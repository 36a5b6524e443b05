"""The CPU planner's walk orders: how each kernel of the kernel IR walks memory (its Schedule, which
`stage="kernels"` prints), chosen after fusion for the llvm backend, from ir/layout.py's facts about
memory order, ir/walks.py's about shared walks, and the thresholds of limits.py.

Fusion builds loop nests in the *logical* order of a kernel's space; a transposed or permuted
operand then walks memory with a large stride in the innermost loop. This pass looks at the
strides of a kernel's largest operands (loads, by the bytes of their buffers they read, and the
outputs it writes) and sets `kernel.schedule` (ir/kernels.py's Schedule) when natural order is
not the memory order:

- map kernels and reduce_acc kernels: loop order = the largest operand's axes by stride,
  largest outermost, its unit-stride axis innermost (a permuted view iterates in storage order;
  the outermost loop, which threads split, then gives each thread a contiguous slab);
- map and reduce_acc kernels whose largest operands disagree on the unit-stride axis (a 2-D
  transpose; (x.T * z).sum(0)): tile both axes by TILE (tiles(): backends/cpu/machine.py's, calibrated) so that the tile's reads and writes both stay
  in cache ((2048, 2048) float32 (x.T * z).sum(0), one thread: 56 ms in x's memory order, 24 ms
  tiled, torch.compile's 35 ms in the same run). An accumulation is tiled only when it moves more
  than TILED_ACC_BYTES: below, its operands stay in L2 in any order, and the tiled loop nest costs
  compile time (W4's 256 x 256 relu-backward and bias-gradient kernel tiled: its first call's
  instructions 1.6G -> 2.5G). A map's operands read along the
  outputs' other axis are read a tile at a time and transposed in registers where that pays
  (`transposed`: Schedule.transposed, the output's axis b tiled outermost; `settle` puts a's
  tiles outermost for large outputs that the target does not stream);
- row-reduction kernels whose largest input's unit-stride axis is a kept one (a sum or softmax
  over a transposed view's rows = over columns of memory): reduce *across* the kept axis, a
  vector of ACROSS_TILE (tiles(): calibrated) partial results per tile while the rows stream by (threads split the
  tiles); a kernel of independent reductions only, whose vectors of partial results over the
  whole kept axis are small (by_rows), instead walks memory in order, whole rows, and threads
  split the rows, each chunk with its own vectors (`rows`); where other heavy reads walk a reduced
  axis with unit stride ((x.T * z).sum(1): `mixed`), the tiles are MIXED_TILE wide, so that those
  reads' lines stay in L1 while the reduced axis streams by, and those reads are transposed in
  registers a tile at a time (`across_transposed`: Schedule.transposed) instead of gathered.

- row kernels (natural order) whose phases reduce a maximum m and then sum exp(a - g(m)) (softmax,
  log_softmax, logsumexp, cross-entropy rows): the two reductions are one walk over the row, a
  running maximum with a rescaled sum (`online`), so each row is read from memory once for both.
- row kernels (natural order): each phase joins the first walk over the row after the walks of the
  phases whose results it reads (`walks`), so phases that do not read each other share one loop
  and compute their common subexpressions once per element (a layer norm backward: its two row
  sums, the gradient map, the weight and bias gradient sums are three walks, not five).

Before any of this, fusion asks `rows_first` (ir/layout.py) whether a reduction over leading axes reduces memory's
rows (x.T.sum(0)): it is then built as a row kernel over a permuted space, its kept axes outer.

Kernels already in memory order, without such a pair, keep `schedule = None` and lower as before.
"""
import math

from ....ir import boxes
from ....ir.kernels import Schedule, hinted, nbytes
from ....ir.layout import heavy, memory_order, mixed, operands, unit_axis
from .sized import generic, pin, settled, strategy
from ....ir.walks import online_columns, online_pairs, walks
from . import limits


def schedule(kernels):
    """Set `schedule` on every loop and reduce_acc kernel of `kernels` (in place); returns them. A kernel
    with symbolic sizes whose best schedule, chosen on its hints, is not `generic` keeps its tiles without
    register transposes where that is generic (tile counts at the call: no size compiled in, so a batch
    that changes never retraces; a transposing map runs ~2.4x slower than with register tiles), else is
    pinned (sized.py), else split (online columns) or run in natural order."""
    for j in reversed(range(len(kernels))):
        kernels[j] = settled(kernels[j])
        _schedule(k := kernels[j])
        sch = k.schedule
        if sch is not None and sch.transposed and k.symbolic() and not generic(sch):
            plain = Schedule(sch.levels, sch.across, sch.map_levels, sch.online, sch.walks, sch.rows)
            if generic(plain):
                k.schedule = plain
        if k.schedule is not None and k.symbolic() and not generic(k.schedule):
            pinned = pin(k, strategy(k.schedule))
            if pinned is not None:
                kernels[j] = pinned
                _schedule(pinned)
            elif k.kind == "reduce_acc" and k.schedule.online:    # maxima, then the sums that read them
                kernels[j:j + 1] = k.online_apart()
            else:
                k.schedule = None
                _walks(k)
    for j in reversed(range(len(kernels))):     # sizes a pin of a later kernel fixed
        k = settled(kernels[j])
        if k is not kernels[j]:
            _schedule(k)
            if not k.symbolic() or k.schedule is None or generic(k.schedule):
                kernels[j] = k
    return kernels


def _walks(k):
    if k.kind == "loop" and k.split and k.schedule is None:
        pairs = online_pairs(k)
        groups = walks(k, pairs)
        if pairs or groups:
            k.schedule = Schedule([(d, 0) for d in range(len(k.shape))], online=pairs, walks=groups)


def _schedule(k):
    if k.kind == "reduce_acc" and (sch := columns_online(k)) is not None:
        k.schedule = sch
    elif k.kind in ("loop", "reduce_acc") and len(k.shape) > 1:
        k.schedule = choose(k)
        if k.kind == "loop" and k.schedule is not None and k.schedule.across is not None and k.accumulated():
            k.schedule = None           # the across lowerings keep no sums over the rows; natural order does
    _walks(k)


def columns_online(k):
    """The Schedule of reduce_acc kernel k when its reductions over leading axes are float maxima m and
    sums that read them only as rescaled(tree, m), beside reductions that read neither (all over the
    same axes, its kept axes trailing, the last one the unit-stride axis of its largest read): one
    walk computes them all (ir/walks.py's online_columns; backends/cpu/online_columns.py). Its rows whole, threads splitting the rows
    (`rows`: the kept axes before the last have one element; each chunk's maxima and sums relative
    to them, joined rescaled: joins._online_join), or a tile of the last axis where its vectors
    would pass ONLINE_LIMIT elements (threads split the tiles: each owns its columns, no partial
    results to join); in blocks read twice while in cache: the block's maxima,
    then the sums at the running maxima, the running sums rescaled by exp(g(old) - g(new)) as they
    grow. `online` pairs each maximum with the sums that read it. None otherwise.

    Measured (logsumexp over dim 0, float32, one thread, CPU time of the kernel): whole rows in
    blocks of 1 MiB against tiles of 256 columns in blocks of 64 KiB, (2048, 1000) 2.2 against 3.9
    ms, (2000, 2048) 4.9 against 7.7, (256, 16384) 5.4 against 6.3; tiles of half a row 3.6 ms for
    (2048, 1000); its two walks before (max, then the sum of exp) 2.6 ms."""
    pairs = online_columns(k)
    if pairs is None:
        return None
    shape = hinted(k).shape         # heuristics on the hints: they change speed only
    n, r, per = len(shape), len(k.phases[0].axes), len(k.phases)
    u = n - 1
    if shape[u] * per <= limits.ONLINE_LIMIT and math.prod(shape[r:u]) == 1:
        return Schedule([(d, 0) for d in range(r)] + [(u, 0)], across=u, online=pairs, rows=True)
    tile = shape[u] if shape[u] * per <= limits.ONLINE_LIMIT else \
        max(limits.tiles()[1], limits.ONLINE_LIMIT // per // 64 * 64)
    return Schedule([(d, 0) for d in range(r, u)] + [(u, tile)] + [(d, 0) for d in range(r)] + [(u, 0)],
                    across=u, online=pairs)


def by_rows(k, u, kept):
    """Whether a kernel reducing across its unit-stride kept axis u walks whole rows of memory with
    threads splitting the rows (Schedule.rows) rather than tiles of u: its phases are reductions
    none of which reads another, its other kept axes have one element, and the vectors of partial
    results over u stay small (ROWS_LIMIT elements for all phases). Tiles narrower than a row leave
    the rest of each row's cache lines to a later tile (and the prefetchers fetch them anyway)."""
    made = {id(v) for ph in k.phases for v, _ in ph.outputs}
    return (all(ph.kind == "reduce" for ph in k.phases) and all(k.shape[d] == 1 for d in kept)
            and k.shape[u] * len(k.phases) <= limits.ROWS_LIMIT
            and not any(id(ld.buf) in made for ld in k.reads))


def across_transposed(k, u, r):
    """The loads of a mixed across kernel (`mixed`: reductions across kept axis u, r its innermost
    reduced axis) to read a tile at a time with unit-stride vectors along r and transpose in
    registers (Schedule.transposed): those with stride 1 along r and a larger one along u, of 4- or
    8-byte elements (at most TRANSPOSED distinct ones, the first read), where the kernel moves more
    than REGS_MIN bytes; else ().

    Measured ((2048, 2048) (x.T * z).sum(1), one thread, CPU time, interleaved, Xeon with AVX-512,
    a loaded machine): float32 3.3 ms with z's tiles transposed against 7.3 with z gathered (a copy of
    half its bytes: 2.8 ms), float64 5.7 against 6.4; (1000, 1000) float32 0.64 against 1.64."""
    return () if k.bytes_moved() <= limits.REGS_MIN else _unit_along(k, r, u)


def _unit_along(k, a, b):
    """The distinct loads of k with stride 1 along axis a and a larger one along b, of 4- or 8-byte
    elements: the first TRANSPOSED of them (each keeps a tile on the stack)."""
    out, seen = [], set()
    for ld in k.reads:
        key = (id(ld.buf), ld.strides, ld.offset)
        if ld.strides[a] == 1 and abs(ld.strides[b]) > 1 and ld.dtype.itemsize in (4, 8) and key not in seen:
            seen.add(key)
            out.append(ld)
    return tuple(out[:limits.TRANSPOSED])


def transposed(k, a, b):
    """The loads of map kernel k, tiled over a and b, to read a tile at a time with unit-stride
    vectors along a and transpose in registers (Schedule.transposed): those with stride 1 along a and
    a larger one along b, of 4- or 8-byte elements (at most TRANSPOSED distinct ones, the first
    read: each keeps a tile on the stack); () unless b is the outputs' unit-stride axis and their
    rows along b are whole 64-byte lines, or the outputs fit in cache (REGS_CACHED bytes); () too
    for a map that moves at most REGS_MIN bytes: in L2, its scalar tiles run as fast and its code
    compiles in half the time (where(x.T > 0.5, g, 0), one thread: (128, 128) 8.4 us against 7.7,
    first call 21 ms against 38; (256, 256) 57 us against 20, so above it the tiles pay).

    Measured (python -m tracegrad.bench.transpose; one thread, 2-core machine): the tiles then walk
    b's tiles outermost, so each operand is read in memory order (TILE rows at a time), and a large
    fresh output's rows are streamed (backends/cpu/stream.py); x.T * 2 of (4096, 4096) float32 took 1.6x
    a copy of its bytes (3.0x before), float64 2.5x (3.7x), (512, 512) float32 1.5x (3.4x). Output
    rows that are not whole lines store no whole line (not streamed): every order and lowering then
    waits on reading each output line before writing it, 2.9-3.5x, the register tiles a little
    slower than the element loops (3.5x against 2.9x for (4093, 4101) float32; 2.2x against 1.9x
    for (1001, 1000), even at (701, 700), 1.2x against 3.2x for (301, 300): in cache)."""
    outs = [v for ph in k.phases for v, _ in ph.outputs]
    if b != len(k.shape) - 1 or any(ph.kind != "map" for ph in k.phases) or k.bytes_moved() <= limits.REGS_MIN or not (
            all(k.shape[b] * v.dtype.itemsize % limits.LINE == 0 for v in outs)
            or sum(nbytes(v) for v in outs) <= limits.REGS_CACHED):
        return ()
    return _unit_along(k, a, b)


def settle(kernels, streamed):
    """Once a target knows which outputs it streams (`streamed`: their ids; backends/cpu/stream.py): a
    transposing map whose outputs exceed REGS_CACHED bytes and do not all stream (written into an
    input's memory, or read by a later kernel) walks a's tiles outermost, its output rows in order
    (in place). Measured (one thread, x.permute(0, 2, 1) * 2 of (16, 1024, 1021) written into an
    existing array): float32 2.7x a copy of its bytes with a's tiles outermost, 2.8x with b's,
    6.5x without register tiles; float64 3.4x, 3.9x, 5.0x."""
    for k in kernels:
        sch = k.schedule
        if sch is not None and sch.transposed and sum(nbytes(v) for v in k.outputs) > limits.REGS_CACHED and \
                not all(id(v) in streamed for v in k.outputs):
            *outer, (b, tb), (a, ta), _, _ = sch.levels
            k.schedule = Schedule(outer + [(a, ta), (b, tb), (a, 0), (b, 0)], transposed=sch.transposed)
    return kernels


def choose(k):
    """The Schedule of one kernel, or None when natural order already walks memory in order."""
    k = hinted(k)                   # heuristics on the hints: they change speed only
    ops = [(b, st) for b, st in operands(k) if unit_axis(k.shape, st) is not None]
    if not ops:
        return None
    big = heavy(ops)
    lead = big[0][1]
    order = memory_order(k.shape, lead)
    units = []
    for _, st in big:
        u = unit_axis(k.shape, st)
        if u not in units:
            units.append(u)
    if k.kind == "loop" and any(ph.kind == "reduce" for ph in k.phases):
        # The phases stream the *inputs* once each: their layout decides. A map phase's output
        # written across the kept axis touches one cache line per tile column, refilled over the
        # next rows: a tile's lines stay in L1.
        reduced = set(range(k.split, len(k.shape)))
        reads = [(nbytes(ld.buf), ld.strides) for ld in boxes.reads(k) if unit_axis(k.shape, ld.strides) is not None]
        src = max(reads, key=lambda o: o[0])[1] if reads else lead
        u = unit_axis(k.shape, src)
        across = mixed(k, reads, reduced)
        if across is None and u in reduced:
            return None
        if across is not None:                               # reads disagree: narrow tiles of the kept one
            src = max((r for r in reads if unit_axis(k.shape, r[1]) == across), key=lambda o: o[0])[1]
            u = across
        order = memory_order(k.shape, src)
        kept = [d for d in order if d not in reduced and d != u]
        if across is None and by_rows(k, u, kept):
            return Schedule([(d, 0) for d in order if d in reduced] + [(d, 0) for d in kept] + [(u, 0)],
                            across=u, rows=True)
        last = len(k.shape) - 1                              # a map phase's unit-stride axis
        maps = any(ph.kind == "map" for ph in k.phases)
        side, tile = limits.tiles()
        tile = limits.MIXED_TILE if across is not None else tile
        walk = sorted((d for d in order if d in reduced), key=lambda d: k.shape[d] > 1)   # unit axes outermost
        return Schedule([(d, 0) for d in kept] + [(u, tile)] + [(d, 0) for d in walk] + [(u, 0)], across=u,
                        map_levels=[(d, 0) for d in order if d in reduced and d != last]
                        + [(last, side), (u, 0), (last, 0)] if maps else None,
                        transposed=across_transposed(k, u, walk[-1]) if across is not None else ())
    if len(units) > 1 and (k.kind == "loop" or k.bytes_moved() > limits.TILED_ACC_BYTES):  # a transpose: tile both
        a, b = units[1], units[0]                            # the largest operand's unit axis innermost
        outer = [(d, 0) for d in order if d not in (a, b)]
        last = len(k.shape) - 1                              # the outputs' unit axis: stores stay vectors
        regs = transposed(k, a + b - last, last) if last in (a, b) and k.kind == "loop" else ()
        if regs:                                             # b's tiles outermost: regs read in memory order
            a, b = a + b - last, last
            return Schedule(outer + [(b, limits.tiles()[0]), (a, limits.tiles()[0]), (a, 0), (b, 0)], transposed=regs)
        return Schedule(outer + [(a, limits.tiles()[0]), (b, limits.tiles()[0]), (a, 0), (b, 0)])
    if tuple(order) == tuple(range(len(k.shape))):
        return None
    return Schedule([(d, 0) for d in order])


