"""The CPU planner: how each kernel of the kernel IR runs on the CPU, decided in one place, with every
threshold in limits.py. The emitters (llvm.py's EMIT table and the modules it calls) lower what they
are given and choose nothing.

- `schedule(kernels)` (order.py, run by jit/pipeline.py for the llvm backend after fusion): each
  kernel's walk over memory, its Schedule (loop order, tiles, walks across a kept axis, online
  pairs, shared row walks, register transposes), which `stage="kernels"` prints;
- `plan_program(...)` (build.py, per compiled graph): which outputs' stores stream (`streamed`),
  the transposing maps whose outputs do not stream walk their output rows in order (`settle`), and
  each loop and reduce_acc kernel's Strategy, one of the closed set Kind names.

The strategies (Kind), each lowered by one entry of llvm.py's EMIT:
  ONLINE_COLUMNS  column maxima and the sums of exp that read them in one walk (online_columns.py)
  COLUMNS         reductions over leading axes accumulated in natural order (llvm.py's _reduce_acc)
  TILED_COLUMNS   the same in the Schedule's tiled order
                  (both: a Walk of their loop nest, and the sums kept in float64 stack arrays)
  ACROSS_ROWS     reductions across a kept unit-stride axis, whole rows of memory (scheduled.py)
  ACROSS_TILES    the same in tiles of the kept axis, maybe reading tiles transposed in registers
  PERMUTED_MAP    maps in a permuted loop order (scheduled.py)
  TRANSPOSED_MAP  maps tiled as a transpose, tiles transposed in registers (transpose.py)
  ROWS, MAP       row kernels in memory order: shared walks, online rows, a row cache (llvm.py);
                  a MAP (or a COLUMNS walk in natural order) over the pieces of a cat, an unslice or a
                  pad box by box (`boxes`, boxes.py)
"""
import enum
import math
from dataclasses import dataclass

from ....ir import boxes as B
from ....ir.kernels import known, nbytes
from ....lowering.slots import roles
from ....symint import hint, is_sym
from ..coalesce import coalesce
from ..reductions import _acc_dtype
from ..sizes import symbolic
from . import limits
from .order import settle, schedule  # noqa: F401  (the planner's walk orders)


class Kind(enum.Enum):
    ONLINE_COLUMNS = "online column walk"
    COLUMNS = "column accumulation, natural order"
    TILED_COLUMNS = "column accumulation, tiled"
    ACROSS_ROWS = "across rows"
    ACROSS_TILES = "across tiles"
    PERMUTED_MAP = "permuted map"
    TRANSPOSED_MAP = "register-transposed map"
    ROWS = "row reductions in memory order"
    MAP = "map in memory order"


class Walk(enum.Enum):
    """The loop nest of a column accumulation (llvm.py's _reduce_acc)."""
    OUTER_BLOCKS = "natural order, float32 sums over blocks of OUTER_BLOCK rows joined in float64"
    BLOCKED = "natural order, blocked sums"
    ONE_AXIS = "one long axis, the threads' one, blocked sums"
    TILED_BLOCKED = "the Schedule's levels, blocked at the innermost element loop"
    TILED = "the Schedule's levels, unblocked"


@dataclass(frozen=True)
class Strategy:
    """How one loop or reduce_acc kernel is lowered. `streams`: ids of its outputs whose stores stream;
    `transposed`: an across kernel reads tiles transposed in registers; `walks`, `online`: a row
    kernel's shared walks and online pairs (Schedule.walks, .online); `row_cache`: for a row kernel
    with symbolic rows, the elements its row buffers hold (longer rows run uncached), else None;
    `walk`: a column accumulation's Walk; `wide`: the indices of the phases whose float32 sums keep a
    float64 stack array (column_walk, row_wide); `boxes`: a map or a natural column walk over pieces (a
    cat, an unslice, a pad: ir/boxes.py) runs each piece's region by loops of its own (boxes.py);
    `gathers`: the code may use vector gathers and scatters (limits.gathers)."""
    kind: Kind
    streams: frozenset = frozenset()
    transposed: bool = False
    walks: bool = False
    online: bool = False
    row_cache: int = None
    walk: Walk = None
    wide: frozenset = frozenset()
    boxes: bool = False
    gathers: bool = True

    def text(self):
        """The strategy in words (TRACEGRAD_LOG=kernels): its name, then its options."""
        return self.kind.value + "".join(f", {w}" for w, on in (
            ("register-transposed reads", self.transposed), ("walks", self.walks), ("online rows", self.online),
            ("box by box", self.boxes),
            (f"row cache for rows up to {self.row_cache}", self.row_cache), ("streamed stores", self.streams),
            ("no vector gathers", not self.gathers)) if on)


def plan_program(graph, kernels, aliases, slots, inplace):
    """[Strategy, or None for a kernel that is not a loop or reduce_acc one] of one graph's kernels;
    settles their walks first (in place), once it knows which outputs stream."""
    stream = streamed(graph, kernels, aliases, slots, inplace)
    settle(kernels, stream)         # register transposes where the outputs stream
    return [plan(k, stream) if k.kind in ("loop", "reduce_acc") else None for k in kernels]


def plan(kernel, stream=frozenset()):
    """The Strategy of one loop or reduce_acc kernel, scheduled (order.py); `stream`: the ids of the
    program's outputs whose stores stream."""
    sch = kernel.schedule
    online = sch is not None and bool(sch.online)
    if kernel.reads_own_reductions() and not (kernel.kind == "reduce_acc" and online):
        raise RuntimeError(f"internal error: {kernel.kind} kernel {kernel.ops()} reads its own accumulated "
                           f"reductions without an online column walk; please report it with the function")
    streams = frozenset(id(v) for v in kernel.outputs if id(v) in stream)
    if kernel.kind == "reduce_acc" and online:
        return Strategy(Kind.ONLINE_COLUMNS, streams)
    if kernel.kind == "reduce_acc":
        lowered = coalesce(kernel)
        walk, wide = column_walk(lowered)
        return Strategy(Kind.COLUMNS if sch is None else Kind.TILED_COLUMNS, streams, walk=walk, wide=wide,
                        boxes=walk in (Walk.BLOCKED, Walk.OUTER_BLOCKS) and boxes(lowered))
    if sch is not None and sch.across is not None:
        return Strategy(Kind.ACROSS_ROWS if sch.rows else Kind.ACROSS_TILES, streams, transposed=bool(sch.transposed))
    if sch is not None and sch.reorders():
        return Strategy(Kind.TRANSPOSED_MAP if sch.transposed else Kind.PERMUTED_MAP, streams,
                        gathers=limits.gathers())
    kind = Kind.ROWS if any(ph.kind == "reduce" for ph in kernel.phases) else Kind.MAP
    lowered = coalesce(kernel)
    cache = row_cache(lowered)
    return Strategy(kind, streams, walks=bool(sch and sch.walks), online=online, row_cache=cache,
                    wide=row_wide(lowered, cache), boxes=kind is Kind.MAP and boxes(lowered),
                    gathers=kind is Kind.ROWS or limits.gathers())


def boxes(kernel):
    """Whether a map or a column accumulation in natural order (coalesced: the kernel its emitter lowers)
    over the pieces of a cat, an unslice or a pad is written box by box (boxes.py): when its space has
    2 to MAX_BOXES boxes (ir/boxes.py)."""
    return 1 < B.count(B.bounds(kernel)) <= limits.MAX_BOXES


def column_walk(kernel):
    """(Walk, wide) of a column accumulation (coalesced: the kernel its emitter lowers). A float32 sum
    keeps a float64 stack array while the outputs of all such sums stay within WIDE_LIMIT, when it
    reduces the outermost axis in natural order (joined every OUTER_BLOCK rows) or the innermost loop's
    axis; sums over middle axes add in order, as NumPy's do."""
    shape, sch = kernel.shape, kernel.schedule
    levels = list(sch.levels) if sch is not None else []
    innermost = levels[-1][0] if levels else len(shape) - 1
    wide, left = set(), limits.WIDE_LIMIT
    for i, ph in enumerate(kernel.phases):
        if ph.kind != "reduce":
            continue
        (v, _), = ph.outputs
        oshape = [shape[d] for d in range(len(shape)) if d not in set(ph.axes)]
        if symbolic(oshape) or math.prod(oshape) == 1:
            continue                # sized at the call, or a register accumulator
        if _acc_dtype(ph.lower, v.dtype) is not v.dtype and left >= math.prod(oshape) and \
                (sch is None and 0 in ph.axes or innermost in ph.axes):
            left -= math.prod(oshape)
            wide.add(i)
    if sch is None:
        outer = any(0 in kernel.phases[i].axes for i in wide)
        return Walk.OUTER_BLOCKS if outer else Walk.BLOCKED, frozenset(wide)
    j = innermost_long(shape, levels)
    if j is None or levels[j][1] or any(known(d, 0) for d in shape):
        return Walk.TILED, frozenset(wide)
    return Walk.ONE_AXIS if j == 0 else Walk.TILED_BLOCKED, frozenset(wide)


def row_wide(kernel, capacity=None):
    """The indices of a row kernel's float32 sums over its rows (Kernel.accumulated) that add OUTER_BLOCK
    rows into a float32 array which then joins a float64 one: those of at most WIDE_LIMIT outputs of
    known sizes (coalesced: the kernel its emitter lowers); of symbolic ones, those kept along the row
    only, where the row cache takes rows of up to `capacity` (row_cache) elements: the loop over such
    rows keeps them in arrays of that size (a layer norm's weight gradient, as in the static compile);
    longer rows add into the outputs."""
    summed = {id(ph) for ph in kernel.accumulated()}
    wide = set()
    for i, ph in enumerate(kernel.phases):
        if id(ph) not in summed:
            continue
        (v, _), = ph.outputs
        kept = [d for d in range(len(kernel.shape)) if d not in set(ph.axes)]
        oshape = [kernel.shape[d] for d in kept]
        fits = math.prod(oshape) <= limits.WIDE_LIMIT if not symbolic(oshape) else \
            capacity is not None and capacity <= limits.WIDE_LIMIT and all(d >= kernel.split for d in kept)
        if oshape and fits and _acc_dtype(ph.lower, v.dtype) is not v.dtype:
            wide.add(i)
    return frozenset(wide)


def innermost_long(shape, levels):
    """The index of the innermost of `levels` ((axis, tile) pairs) whose axis may be longer than 1, or None."""
    return max([i for i, (d, _) in enumerate(levels) if is_sym(shape[d]) or shape[d] > 1], default=None)


def row_cache(kernel):
    """For a row kernel whose rows have symbolic sizes that the row cache (rowcache.py) would take at
    their hint: the elements its buffers hold (scratch_limit; the lowering runs rows longer than that
    uncached, a branch per call). Else None."""
    inner = kernel.shape[kernel.split:]
    if kernel.split and symbolic(inner) and 0 < math.prod(map(hint, inner)) <= limits.scratch_limit():
        return limits.scratch_limit()
    return None


def streamed(graph, kernels, aliases, slots, inplace):
    """{id(Value)} of the outputs of `graph` whose stores stream (stream.py's rule): fresh outputs
    written by a map phase, read by no kernel of the program, of at least stream_min_bytes."""
    fresh = roles(graph, kernels, aliases, slots, inplace)[0]
    read = {id(ld.buf) for k in kernels for ld in k.reads}
    mapped = {id(v) for k in kernels if k.kind in ("loop", "reduce_acc")
              for ph in k.phases if ph.kind == "map" for v, _ in ph.outputs}
    return {id(v) for _, v in fresh
            if id(v) in mapped and id(v) not in read and nbytes(v) >= limits.stream_min_bytes()}
