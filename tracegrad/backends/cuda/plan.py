"""The cuda planner: each kernel of the kernel IR (ir/kernels.py) -> the launches that compute it,
each a kernel and one strategy of a closed set, with its launch geometry; every cuda threshold lives
here. The emitters (lower.py with emit/) write what a strategy says and decide nothing. This module
imports nothing from the CPU code generator (backends/cpu/).

The strategies:
- Map: a thread per `width` consecutive elements (width > 1: 16-byte vector accesses), grid-stride;
- Rows: a block per row (a warp per row, `per_block` rows a block, when rows are short) running a
  row kernel's phases, inputs several phases read kept in shared memory (`cache_bytes`);
- Across: a thread per row, walking the row's elements along axis `across` (a column walk);
- Persistent: `blocks` blocks taking the rows in turn, the sums over all rows (a layer norm's loss,
  dW, db) added per block, then a join launch per set of kept axes adds the blocks' partials;
- Tiled: a reduction in tiles of `bx` kept x `by` reduced elements a block; split into `slices`
  when there are too few tiles to fill the GPU, then a join launch adds the slices' partials.

Facts read from the kernel (target-free: ir/layout.py): its phases, split and outputs, which phases
read another's result, and the operands' bytes, unit-stride axes and memory order. This planner
decides from those alone, with its own thresholds: nothing here comes from the CPU's scheduler.

Symbolic sizes (sizes.py): every strategy holds for every size, so none is pinned. Choices of speed
(order, threads, tile shape, slices) are made on the hints; grids are counted at the call (Blocks);
a vector width only where the space's constant factor is a multiple of it; Persistent keeps the
blocks' column sums in registers only over a constant row length (else the sums run as a Tiled
launch after the rows), its blocks (and the partials its join adds) counted at the call.
"""
import math
from dataclasses import dataclass

from ...ir.kernels import hinted, known, loads, nbytes, same_shape
from ...ir.layout import memory_order, operands, unit_axis
from ...strides import contiguous_strides
from ...symint import hint, is_sym
from .emit.reduce import join_of
from .sizes import Blocks

MAP_THREADS = 256      # threads per block of a map kernel (fewer when the space is smaller)
ROW_THREADS = 256      # threads per block walking one row
TILE_THREADS = 1024    # most threads of a block of a tiled reduction
MAX_GRID = 65535       # blocks of one launch; larger spaces loop (grid-stride)
PER_THREAD = 8         # reduced elements per thread a reduction's block is sized for (fewer threads on short rows)
WARP_ROWS = 8          # rows a block takes at once when each row needs a warp only
ROW_CACHE_BYTES = 32768  # shared memory a row kernel keeps inputs in that several of its phases read
FILL_BLOCKS = 264      # blocks that keep a large GPU busy (2 per SM of an H100/H200)
MIN_SLICE = 16         # elements each thread adds, at least, in one slice of a split reduction
MAX_SLICES = 1024      # slices of a split reduction (partial results per kept element)
VECTOR_BYTES = 16      # bytes of one vector access of a map
EAGER_THREADS = 256    # threads per block of an eager kernel
TILE_X = 32            # kept elements side by side when an eager reduction keeps the unit-stride axis
HEAVY = 0.5            # operands at least this fraction of the largest one's bytes decide a walk's order


@dataclass(frozen=True)
class Map:
    order: tuple       # the axes walked, outermost first
    width: int         # elements a thread reads and writes at once
    threads: int
    grid: object       # blocks: an int, or sizes.Blocks counted at the call


@dataclass(frozen=True)
class Rows:
    threads: int       # threads of a block (per_block rows of threads / per_block each)
    per_block: int
    grid: object       # blocks: an int, or sizes.Blocks counted at the call
    cache_bytes: int


@dataclass(frozen=True)
class Across:
    across: int
    threads: int
    grid: object       # blocks: an int, or sizes.Blocks counted at the call


@dataclass(frozen=True, eq=False)
class Persistent:
    threads: int
    blocks: object     # an int, or sizes.Blocks counted at the call (FILL_BLOCKS at most)
    groups: tuple      # (keeps the row's axes: bool, the accumulated phases) per join launch
    join_threads: tuple
    cache_bytes: int


@dataclass(frozen=True, eq=False)
class Tiled:
    reduces: tuple     # the reduce phases over these axes
    maps: tuple        # map phases riding with the first tile launch
    kept: tuple        # axes, memory order (fastest last)
    reduced: tuple
    bx: int
    by: int
    ntiles: object     # blocks: an int, or sizes.Blocks counted at the call
    slices: int        # 1: no split
    chunk: object      # reduced elements a slice adds (None: counted by the kernel from the sizes)
    join_threads: int


@dataclass(frozen=True)
class Launch:
    kernel: object
    name: str
    strategy: object


def pow2(n):
    return 1 << max(0, (int(n) - 1).bit_length())


def warps(n, most):
    """Threads for n parallel items (a symbolic n: its hint): a multiple of 32, at most `most`."""
    return min(most, max(32, -(-hint(n) // 32) * 32))


def blocks(n, per):
    """Blocks of a grid-stride launch over n items, `per` a block, MAX_GRID at most (a Blocks counted at
    the call where n is symbolic)."""
    return Blocks(n, per, MAX_GRID) if is_sym(n) else min(-(-n // per), MAX_GRID)


def empty(v):
    """Whether Value v has no element whatever the sizes (a constant size 0; records no guard)."""
    return any(known(d, 0) for d in v.shape)


def plan(kernel, name):
    """The Launches computing one loop or reduce_acc kernel, in order (none when it writes no
    element; a reduction over no elements writes its identity)."""
    if all(map(empty, kernel.outputs)):
        return []
    if kernel.kind == "reduce_acc" and kernel.reads_own_reductions():
        maxima, rest = statistics_first(kernel)      # the maxima, then the sums that read them
        return plan(maxima, name) + plan(rest, f"{name}_sums")
    if kernel.kind == "loop" and kernel.accumulated():
        persistent = _persistent(kernel)
        if persistent is not None:
            return [Launch(kernel, name, persistent)]
        rows, sums = kernel.apart()                      # a row kernel's sums over its rows: a launch after
        return plan(rows, name) + plan(sums, f"{name}_sums")
    if kernel.kind == "reduce_acc":
        return _tiled(kernel, name)
    if all(ph.kind == "map" for ph in kernel.phases):
        return [Launch(kernel, name, _map(kernel))]
    return [Launch(kernel, name, _rows(kernel))]


def statistics_first(kernel):
    """(the reductions other reductions of reduce_acc `kernel` read, the rest) as two reduce_acc
    kernels run in turn: fusion joins such reductions only where one online column walk computes
    them (a sum of exp(x - max) beside its max); the tiles of a launch cannot wait for a maximum."""
    read = {id(ld.buf) for ph in kernel.phases for _, t in ph.outputs for ld in loads(t)}
    first = [any(id(v) in read for v, _ in ph.outputs) for ph in kernel.phases]
    return [type(kernel)("reduce_acc", kernel.shape, 0, [ph for ph, f in zip(kernel.phases, first) if f == want])
            for want in (True, False)]


def _heavy(ops):
    """The unit-stride axes of the operands [(bytes, strides)] at least HEAVY of the largest one's
    bytes, largest first (an output first among equals), each once; and the largest's strides."""
    big = max(b for b, _ in ops)
    heavy = sorted((o for o in ops if o[0] >= HEAVY * big), key=lambda o: -o[0])
    units = []
    for _, st in heavy:
        if st[1] not in units:
            units.append(st[1])
    return units, heavy[0][1][0]


def element_order(kernel):
    """The axes a map kernel walks, outermost first, consecutive threads along the last: the memory
    order of its largest operand; where its heavy operands disagree on the unit-stride axis (a
    transpose), the largest's unit axis last and the other's before it (one side reads coalesced)."""
    natural = tuple(range(len(kernel.shape)))
    if len(kernel.shape) < 2:
        return natural
    k = hinted(kernel)                       # speed only: no guard recorded
    ops = [(b, (st, unit_axis(k.shape, st))) for b, st in operands(k)]
    ops = [o for o in ops if o[1][1] is not None]
    if not ops:
        return natural
    units, lead = _heavy(ops)
    order = memory_order(k.shape, lead)
    if len(units) > 1:
        a, b = units[1], units[0]
        return tuple([d for d in order if d not in (a, b)] + [a, b])
    return tuple(order)


def across_axis(kernel):
    """The kept axis a row kernel's rows are taken across, a thread per row (Across), or None (a block
    per row): the unit-stride axis of its largest read when that axis is kept, or, for a kernel of
    reductions none of which reads another, a kept one where its heavy reads disagree (some walk the
    row with unit stride, others a kept axis: (x.T * z).sum(1))."""
    if len(kernel.shape) < 2 or not kernel.split:
        return None
    k = hinted(kernel)                       # speed only: no guard recorded
    reduced = set(range(k.split, len(k.shape)))
    reads = [(nbytes(ld.buf), (ld.strides, unit_axis(k.shape, ld.strides))) for ld in k.reads]
    reads = [r for r in reads if r[1][1] is not None]
    if not reads:
        return None
    units, _ = _heavy(reads)
    made = {id(v) for ph in k.phases for v, _ in ph.outputs}
    mixed = all(ph.kind == "reduce" for ph in k.phases) and not any(id(ld.buf) in made for ld in k.reads) \
        and any(u in reduced for u in units)
    kept = [u for u in units if u not in reduced]
    return kept[0] if kept and (mixed or units[0] not in reduced) else None


def vector_width(kernel, n):
    """Elements per vector access (4 of 4 bytes, 2 of 8: 16-byte loads) for a map kernel whose every
    buffer is read and written element for element in one contiguous layout (or, for a read, at one
    element: a broadcast scalar), all of one itemsize, over `n` elements a multiple of it; else 1."""
    full = contiguous_strides(kernel.shape)
    bufs = []
    for ph in kernel.phases:
        for v, t in ph.outputs:
            bufs.append(v)
            for ld in loads(t):
                if not (known(ld.offset, 0) and same_shape(ld.strides, full) or all(known(s, 0) for s in ld.strides)):
                    return 1
                bufs.append(ld.buf)
    sizes = {b.dtype.itemsize for b in bufs}
    if len(sizes) != 1 or sizes.pop() not in (4, 8) or any(b.dtype.name == "bool" for b in bufs):
        return 1
    width = VECTOR_BYTES // bufs[0].dtype.itemsize
    fixed = math.prod(d for d in kernel.shape if not is_sym(d))      # a factor of n whatever the sizes
    return width if (fixed if is_sym(n) else n) % width == 0 else 1


def _map(kernel):
    n = math.prod(kernel.shape)
    width = vector_width(kernel, n)
    threads = warps(-(-hint(n) // width), MAP_THREADS)
    return Map(element_order(kernel), width, threads, blocks(n, threads * width))


def _row_threads(ninner):
    return min(ROW_THREADS, max(32, pow2(-(-hint(ninner) // PER_THREAD))))


def _rows(kernel):
    k, shape = kernel.split, kernel.shape
    nrows, ninner = math.prod(shape[:k]), math.prod(shape[k:])
    across = across_axis(kernel)
    if across is not None:
        threads = warps(nrows, MAP_THREADS)
        return Across(across, threads, blocks(nrows, threads))
    threads = _row_threads(ninner)
    per_block = (WARP_ROWS if is_sym(nrows) else min(WARP_ROWS, nrows)) if threads == 32 else 1   # short rows: a warp each
    return Rows(threads * per_block, per_block, blocks(nrows, per_block), ROW_CACHE_BYTES)


def _persistent(kernel):
    """Persistent for a row kernel whose sums over all its rows are float sums that keep all the
    row's axes or none (those that keep them: over a constant row length); None otherwise."""
    k, shape = kernel.split, kernel.shape
    nrows, ninner = math.prod(shape[:k]), math.prod(shape[k:])
    inner, groups = set(range(k, len(shape))), {}
    for ph in kernel.accumulated():
        kept = inner - set(ph.axes)
        if join_of(ph.lower) != "+" or ph.outputs[0][0].dtype.name not in ("float16", "float32", "float64") \
                or kept not in (set(), inner) or len(ph.outputs) != 1 or kept and is_sym(ninner):
            return None
        groups.setdefault(bool(kept), []).append(ph)
    joins = tuple(warps(ninner if kept else 1, MAP_THREADS) for kept in groups)
    return Persistent(_row_threads(ninner), Blocks(nrows, 1, FILL_BLOCKS) if is_sym(nrows) else min(nrows, FILL_BLOCKS),
                      tuple((kept, tuple(phs)) for kept, phs in groups.items()), joins, ROW_CACHE_BYTES)


def _tiled(kernel, name):
    """Launches for each distinct set of reduced axes of a reduce_acc kernel (the map phases ride
    with the first), none for reductions into empty outputs (their space is empty: so are the maps)."""
    groups = {}
    for ph in kernel.phases:
        if ph.kind == "reduce" and not all(empty(v) for v, _ in ph.outputs):
            groups.setdefault(tuple(sorted(ph.axes)), []).append(ph)
    maps = [ph for ph in kernel.phases if ph.kind == "map"]
    return [Launch(kernel, name if len(groups) == 1 else f"{name}_{g}", tiled(kernel, reduces, maps if g == 0 else []))
            for g, (axes, reduces) in enumerate(groups.items())]


def tiled(kernel, reduces, maps):
    """The Tiled strategy of reductions `reduces` (one set of axes) with `maps` riding along."""
    shape, axes = kernel.shape, set(reduces[0].axes)
    reads = [ld for ph in list(reduces) + list(maps) for _, t in ph.outputs for ld in loads(t)]
    big = max(reads, key=lambda ld: nbytes(ld.buf), default=None)
    kept, reduced, bx, by = tile_geometry(tuple(map(hint, shape)), axes,
                                          tuple(map(hint, big.strides)) if big is not None else None)
    nkept, nred = math.prod(shape[d] for d in kept), math.prod(shape[d] for d in reduced)
    ntiles = blocks(nkept, bx)
    slices, chunk = slices_of(min(-(-hint(nkept) // bx), MAX_GRID), hint(nred), by)
    if is_sym(nred) and slices > 1:
        chunk = None                  # ceil(nred / slices), counted by the kernel at the call
    return Tiled(tuple(reduces), tuple(maps), tuple(kept), tuple(reduced), bx, by, ntiles, slices, chunk,
                 warps(nkept, MAP_THREADS))


def tile_geometry(shape, axes, strides):
    """(kept axes, reduced axes, BX, BY) of a tiled reduction over `axes` of a space of `shape`
    whose largest operand has `strides`: each axis list in memory order (fastest last); BX > 1
    when the unit-stride axis is kept (a tile of BX kept elements read side by side)."""
    order = memory_order(shape, strides) if strides is not None else list(range(len(shape)))
    kept = [d for d in order if d not in axes]
    reduced = [d for d in order if d in axes]
    nkept = math.prod(shape[d] for d in kept)
    nred = math.prod(shape[d] for d in reduced)
    u = unit_axis(shape, strides) if strides is not None else (len(shape) - 1 if shape else None)
    if u is not None and u not in axes and nkept > 1:
        bx = min(32, pow2(nkept))
        return kept, reduced, bx, min(TILE_THREADS // bx, pow2(-(-nred // PER_THREAD)))
    most = TILE_THREADS if nkept < 64 else ROW_THREADS
    return kept, reduced, 1, min(most, max(32, pow2(-(-nred // PER_THREAD))))


def slices_of(ntiles, nred, by):
    """How many slices a tiled reduction splits its reduced elements into (1: none): enough blocks
    to fill the GPU (FILL_BLOCKS), each thread still adding MIN_SLICE elements at least."""
    want = min(-(-FILL_BLOCKS // ntiles), nred // (by * MIN_SLICE), MAX_SLICES)
    if want < 2:
        return 1, nred
    chunk = -(-nred // want)
    return -(-nred // chunk), chunk


# ------------------------------------------------------------ eager kernels (eager/pointwise.py)
def eager_grid(n, threads=None):
    """Blocks of an eager kernel over n items, `threads` (default EAGER_THREADS) a block."""
    return max(1, min(-(-n // (threads or EAGER_THREADS)), MAX_GRID))


def eager_threads(n):
    """Threads per block of an eager elementwise kernel over n elements."""
    return warps(n, EAGER_THREADS)


def eager_reduction(shape, strides, axes):
    """(kept, reduced, bx, by) for reducing an array of `shape` and element `strides` over `axes`:
    the axes in memory order (fastest last); TILE_X kept elements side by side when the unit-stride
    axis is kept, else one per block; by: threads per kept element (powers of two, EAGER_THREADS in
    all at most, a warp at least when bx is 1: it combines with warp shuffles)."""
    order = memory_order(shape, strides)
    kept = tuple(d for d in order if d not in axes)
    reduced = tuple(d for d in order if d in axes)
    live = [d for d in range(len(shape)) if shape[d] > 1 and strides[d]]
    unit = min(live, key=lambda d: abs(strides[d])) if live else None
    nkept, nred = math.prod(shape[d] for d in kept), math.prod(shape[d] for d in reduced)
    per = -(-nred // PER_THREAD)
    if unit is not None and unit not in axes and nkept > 1:
        return kept, reduced, TILE_X, min(EAGER_THREADS // TILE_X, pow2(per))
    return kept, reduced, 1, min(EAGER_THREADS, max(32, pow2(per)))
