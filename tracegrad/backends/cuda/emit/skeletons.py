"""The kernel shapes of the GPU, as numba.cuda source over an iteration space.

- `map_body`: one thread per element, grid-stride loop; consecutive threads take consecutive
  elements along the space's innermost axis of `order` (the memory order: coalesced).
- `rows_body`: a block per row (grid-stride over rows); each phase walks the row with the block's
  threads side by side (coalesced), a reduce phase then combines the threads' partials with warp
  shuffles and one shared slot per warp, and every thread holds the row's result for later phases.
  Short rows take a warp each instead (several rows per block, shuffles only). An input several
  phases read is kept in shared memory by the first (read from memory once per row).
- `across_body`: a thread per row, rows ordered so that consecutive threads take consecutive
  elements of the kept unit-stride axis (a reduction over columns of memory reads coalesced).
- `tiles_body`: reductions over any axes: a block of BX x BY threads per tile of BX kept
  elements, its BY rows of threads splitting the reduced elements; BX = 1 combines with warp
  shuffles, BX > 1 (the kept axis is the unit-stride one: coalesced across it) with a shared-
  memory tree over the rows of threads. When there are too few tiles to fill the GPU, the grid's
  y axis splits the reduced elements too, and `combine_body` (a second launch) joins the slices'
  partial results: no atomics, and the same result on every run.

A `layout` says how the space is sized and how buffers are read and written: `dims[d]` (source
text), `load(ld, idx)`, `store_full(v, idx)` (a map output over the whole space) and
`store_kept(v, idx, kept)` (a reduction's output, kept axes only); `idx[d]` is the source text of
axis d's index. Skeletons emit the body of the kernel function into `src` (expr.Lines).
"""
import contextlib

import numpy as np

from ....ir.kernels import Const, Load, loads, shape_key
from .expr import Emitter, dtype_of
from .reduce import WARP, Acc, block_allreduce, combine, two_sum, warp_allreduce


def decompose(src, flat, axes, dims, stem):
    """Emit the indices of `axes` (outermost first, the last fastest) from linear index `flat`;
    returns {axis: source text}. Axes of length 1 are "0"."""
    idx, live = {}, [d for d in axes if dims[d] != "1"]
    for d in axes:
        if dims[d] == "1":
            idx[d] = "0"
    r = flat
    for j, d in enumerate(reversed(live)):
        if j == len(live) - 1:
            idx[d] = src.assign(r, f"{stem}{d}_")
        else:
            idx[d] = src.assign(f"{r} % {dims[d]}", f"{stem}{d}_")
            r = src.assign(f"{r} // {dims[d]}", "q")
    return idx


def count(src, dims, axes):
    """Source text of the number of elements over `axes`."""
    consts = [int(dims[d]) for d in axes if dims[d].isdigit()]
    names = [dims[d] for d in axes if not dims[d].isdigit()]
    n = 1
    for c in consts:
        n *= c
    return " * ".join([str(n)] * (n != 1 or not names) + names)


class Phases:
    """The phases of one kernel with the values this launch already holds: a row's reduction
    result (`rows`), and the row cache: {load key: (shared array, first phase)} — a kernel input
    that several phases of a row kernel read is kept in shared memory by the first, the others read
    it there (`phase`: the phase being emitted; `slot`: the element's index in the cache)."""

    def __init__(self, layout, phases, split=None, cache=None, slot=None):
        self.layout, self.phases, self.split = layout, phases, split
        self.rows, self.cache, self.slot, self.phase = {}, cache or {}, slot, 0

    def emitter(self, src, idx):
        lay = self.layout

        def load(ld):
            held = self.rows.get(id(ld.buf))
            if held is not None:
                if not lay.reads_row(ld, self.split):
                    raise NotImplementedError(f"a row reduction's result {ld.buf} read outside its row")
                return held
            cached = self.cache.get(_key(ld))
            if cached is not None and self.phase > cached[1]:
                return f"{cached[0]}[{self.slot}]"
            if cached is not None and self.phase == cached[1]:
                x = src.assign(lay.load(ld, idx), "x")
                src.emit(f"{cached[0]}[{self.slot}] = {x}")
                return x
            return lay.load(ld, idx)
        held = {key[1]: f"{name}[{self.slot}]" for key, (name, first) in self.cache.items()
                if key[0] == "value" and self.phase > first}
        return Emitter(src, load, held, invariant=self.along_row if self.split is not None else None)

    def keep(self, src, em):
        """Store the values this phase computed first that later phases read (the row cache's values)."""
        for key, (name, first) in self.cache.items():
            if key[0] == "value" and first == self.phase and key[1] in em.memo:
                src.emit(f"{name}[{self.slot}] = {em.memo[key[1]]}")

    def along_row(self, t):
        """Whether tree t's value is the same at every element of a row: it reads buffers (row results),
        none of them along the row's axes."""
        lds = loads(t)
        return bool(lds) and not any(any(ld.strides[self.split:]) for ld in lds)

    def put_maps(self, src, em, phases, idx):
        for ph in phases:
            vals = [(v, em.value(t)) for v, t in ph.outputs]
            for v, val in vals:
                src.emit(f"{self.layout.store_full(v, idx)} = {val}")
                for t in _loads_of(self.phases, v):   # later phases read it here: the value held
                    if self.layout.same_element(t, v):
                        em.memo[id(t)] = val


def _key(ld):
    return id(ld.buf), shape_key(ld.strides), shape_key((ld.offset,))     # a symbolic size by its expression


def row_cache(src, phases, split, ninner, rows, budget):
    """Declare the row cache of a row kernel (see Phases), while its rows (`rows` at once) fit in
    `budget` bytes of shared memory: first the values that two or more phases compute (the
    outermost such subtrees, varying along the row: softmax's exp(x - max), computed once), then
    the kernel inputs read by two or more phases, varying along and across the rows; returns it."""
    made = {id(v) for ph in phases for v, _ in ph.outputs}
    first, seen = {}, {}
    for p, ph in enumerate(phases):
        for _, t in ph.outputs:
            for ld in loads(t):
                if id(ld.buf) in made or ld.dtype.name == "bool" or not any(ld.strides[:split]) \
                        or not any(ld.strides[split:]):
                    continue
                first.setdefault(_key(ld), (p, ld))
                seen.setdefault(_key(ld), set()).add(p)
    wanted = [(("value", id(x)), p, dtype_of(x)) for x, p in _shared_values(phases, split)]
    wanted += [(key, p, ld.dtype.name) for key, (p, ld) in first.items() if len(seen[key]) > 1]
    cache = {}
    for key, p, dtype in wanted:
        size = rows * ninner * np.dtype(dtype).itemsize
        if size <= budget:
            budget -= size
            cache[key] = (f"rc{len(cache)}", p)
            src.emit(f"rc{len(cache) - 1} = cuda.shared.array({rows * ninner}, {dtype})")
    return cache


def _shared_values(phases, split):
    """[(node, first phase)]: the operations a later phase of a row kernel computes again (outermost
    ones only: their arguments are then not needed), whose value varies along the row."""
    first, out = {}, {}
    for p, ph in enumerate(phases):
        stack = [t for _, t in ph.outputs]
        while stack:
            x = stack.pop()
            if isinstance(x, (Load, Const)):
                continue
            if first.get(id(x), p) < p:
                if dtype_of(x) != "bool" and any(any(ld.strides[split:]) for ld in loads(x)):
                    out[id(x)] = (x, first[id(x)])
                continue
            first.setdefault(id(x), p)
            stack.extend(x.args)
    return list(out.values())


def _loads_of(phases, v):
    return [ld for ph in phases for _, t in ph.outputs for ld in loads(t) if ld.buf is v]


def map_body(src, layout, phases, order, threads, declared=False):
    """Every phase (all maps) at each element, one thread per element, grid-stride (threads per
    block: a constant, or None: the launch's; `declared`: i and step are set already)."""
    dims, shape_axes = layout.dims, list(order)
    n = count(src, dims, shape_axes)
    threads = threads or "cuda.blockDim.x"
    if not declared:
        src.emit(f"i = int64(cuda.blockIdx.x) * {threads} + cuda.threadIdx.x")
        src.emit(f"step = int64(cuda.gridDim.x) * {threads}")
    with src.block(f"while i < {n}:"):
        idx = decompose(src, "i", shape_axes, dims, "ix")
        ph = Phases(layout, phases)
        ph.put_maps(src, ph.emitter(src, idx), phases, idx)
        src.emit("i += step")


def vector_map_body(src, layout, phases, order, threads, width):
    """map_body with `width` consecutive elements a thread, read and written by vector accesses
    (vector.py) when every buffer's address is aligned to 16 bytes (else map_body's loop)."""
    n = count(src, layout.dims, list(order))
    names = sorted({layout.args[id(v)] for ph in phases for v, t in ph.outputs} |
                   {layout.args[id(ld.buf)] for ph in phases for _, t in ph.outputs for ld in loads(t)})
    src.emit(f"i = int64(cuda.blockIdx.x) * {threads} + cuda.threadIdx.x")
    src.emit(f"step = int64(cuda.gridDim.x) * {threads}")
    made = {id(v) for ph in phases for v, _ in ph.outputs}
    with src.block(f"if ({' | '.join(f'address({b})' for b in names)}) & 15 == 0:"):
        with src.block(f"while i < {int(n) // width if n.isdigit() else f'({n}) // {width}'}:"):
            src.emit(f"e = i * {width}")
            lanes, held = {}, {}

            def lane_load(k):
                def load(ld):
                    if not any(ld.strides):
                        return layout.load(ld, {})
                    if id(ld.buf) in made:
                        return held[id(ld.buf)][k]
                    if id(ld.buf) not in lanes:
                        xs = [src.tmp("x") for _ in range(width)]
                        src.emit(f"{', '.join(xs)} = vload{width}({layout.args[id(ld.buf)]}, e)")
                        lanes[id(ld.buf)] = xs
                    return lanes[id(ld.buf)][k]
                return load
            ems = [Emitter(src, lane_load(k)) for k in range(width)]
            for ph in phases:
                for v, t in ph.outputs:
                    held[id(v)] = [em.value(t) for em in ems]
                    src.emit(f"vstore{width}({layout.args[id(v)]}, e, {', '.join(held[id(v)])})")
            src.emit("i += step")
    with src.block("else:"):
        src.emit(f"i = int64(cuda.blockIdx.x) * {threads} + cuda.threadIdx.x")
        map_body(src, layout, phases, order, threads, declared=True)


def _prologue(src, threads):
    src.emit("tid = cuda.threadIdx.x")
    src.emit("lane = tid & 31")
    src.emit("warp = tid >> 5")


def _shared(src, accs, size=WARP):
    """A shared array of `size` slots per accumulator dtype (and `<name>_lo` beside it where a
    compensated sum needs one); returns {dtype: name}."""
    out = {}
    for a in accs:
        if a.at not in out:
            out[a.at] = f"sh_{a.at}"
            src.emit(f"sh_{a.at} = cuda.shared.array({size}, {a.at})")
    for d in sorted({a.at for a in accs if a.lo}):       # in one order: the source (a cache key) is the same in every process
        src.emit(f"sh_{d}_lo = cuda.shared.array({size}, {d})")
    return out


def rows_body(src, layout, kernel_phases, split, ndim, threads, rows_per_block=1, cache_bytes=0, persist=None):
    """A block per row of the outer `split` axes (or, rows_per_block > 1, a warp per row: short
    rows); phases in turn over the row's inner axes, inputs several phases read kept in shared
    memory (at most `cache_bytes`; the row's size must be a constant). `persist`: {id(phase): (partials
    array, whether it keeps the inner axes)} for sums over all the rows (a block per row only): each
    block adds its rows into accumulators that outlive the row (one, or one per column: registers
    once the compiler unrolls their loop), then writes its partial results for combine_body."""
    dims = layout.dims
    outer, inner = list(range(split)), list(range(split, ndim))
    _prologue(src, threads)
    accs = {id(ph): Acc(src, ph.lower, ph.outputs[0][0].dtype.name) for ph in kernel_phases if ph.kind == "reduce"}
    warp_rows = rows_per_block > 1
    shared = {} if warp_rows else _shared(src, list(accs.values()))
    me, width = ("lane", WARP) if warp_rows else ("tid", threads)
    nrows, ninner = count(src, dims, outer), count(src, dims, inner)
    cache = row_cache(src, kernel_phases, split, int(ninner), rows_per_block, cache_bytes) \
        if cache_bytes and ninner.isdigit() else {}
    persist = persist or {}
    cols = {key: _Columns(src, accs[key], -(-int(ninner) // threads)) for key, (_, kept) in persist.items() if kept}
    for key in persist:
        (cols[key] if key in cols else accs[key]).begin()
    src.emit(f"row = int64(cuda.blockIdx.x) * {rows_per_block} + warp" if warp_rows else "row = int64(cuda.blockIdx.x)")
    with src.block(f"while row < {nrows}:"):
        oidx = decompose(src, "row", outer, dims, "o")
        st = Phases(layout, kernel_phases, split, cache, f"warp * {ninner} + j" if warp_rows else "j")
        for p, ph in enumerate(kernel_phases):
            st.phase = p
            acc = accs.get(id(ph))
            if id(ph) in cols:
                with cols[id(ph)].walk(threads, ninner):
                    _row_element(src, st, ph, cols[id(ph)], oidx, inner, dims)
                continue
            if acc and id(ph) not in persist:
                acc.begin()
            src.emit(f"j = int64({me})")
            with src.block(f"while j < {ninner}:"):
                _row_element(src, st, ph, acc, oidx, inner, dims)
                src.emit(f"j += {width}")
            if acc is None or id(ph) in persist:
                continue
            if warp_rows:
                warp_allreduce(src, acc)
            else:
                block_allreduce(src, acc, threads, shared[acc.at])
            _row_result(src, st, ph, acc, oidx, outer, f"{me} == 0")
        src.emit(f"row += int64(cuda.gridDim.x) * {rows_per_block}")
    for key, (part, kept) in persist.items():
        if kept:
            cols[key].store(part, threads, ninner)
            continue
        block_allreduce(src, accs[key], threads, shared[accs[key].at])
        total = accs[key].total()
        with src.block("if tid == 0:"):
            src.emit(f"{part}[cuda.blockIdx.x] = {total}")


class _Columns:
    """A thread's accumulators of a sum over the rows that keeps the row's axes: one per element
    j = tid + k * threads of the row (k < n). A block adds a few rows each (its share of them), so
    a plain sum each; the join adding the blocks' partials compensates (registers: a compensated
    pair per column left the backward of a wide layer norm one block per SM)."""

    def __init__(self, src, acc, n):
        self.src, self.acc, self.n = src, acc, n
        self.hi = src.tmp("ch")

    def begin(self):
        at = self.acc.at
        self.src.emit(f"{self.hi} = cuda.local.array({self.n}, {at})")
        with self.src.block(f"for k in range({self.n}):"):
            self.src.emit(f"{self.hi}[k] = {at}(0.0)")

    @contextlib.contextmanager
    def walk(self, threads, ninner):
        """`with cols.walk(...):` the body runs at element j of the row, accumulator k."""
        with self.src.block(f"for k in range({self.n}):"):
            self.src.emit(f"j = int64(tid) + k * {threads}")
            with self.src.block(f"if j < {ninner}:"):
                yield

    def add(self, x):
        at = self.acc.at
        self.src.emit(f"{self.hi}[k] = {at}({self.hi}[k] + {at}({x}))")

    def store(self, part, threads, ninner):
        with self.src.block(f"for k in range({self.n}):"):
            self.src.emit(f"j = int64(tid) + k * {threads}")
            with self.src.block(f"if j < {ninner}:"):
                self.src.emit(f"{part}[int64(cuda.blockIdx.x) * {ninner} + j] = {self.hi}[k]")


def across_body(src, layout, kernel_phases, split, ndim, u, threads):
    """A thread per row of the outer `split` axes, consecutive threads along kept axis u."""
    dims = layout.dims
    outer, inner = list(range(split)), list(range(split, ndim))
    nrows, ninner = count(src, dims, outer), count(src, dims, inner)
    src.emit(f"t = int64(cuda.blockIdx.x) * {threads} + cuda.threadIdx.x")
    src.emit(f"step = int64(cuda.gridDim.x) * {threads}")
    with src.block(f"while t < {nrows}:"):
        oidx = decompose(src, "t", [d for d in outer if d != u] + [u], dims, "o")
        st = Phases(layout, kernel_phases, split)
        for ph in kernel_phases:
            acc = Acc(src, ph.lower, ph.outputs[0][0].dtype.name) if ph.kind == "reduce" else None
            if acc:
                acc.begin()
            with src.block(f"for j in range({ninner}):"):
                _row_element(src, st, ph, acc, oidx, inner, dims)
            if acc is not None:
                _row_result(src, st, ph, acc, oidx, outer)
        src.emit("t += step")


def _row_element(src, st, ph, acc, oidx, inner, dims):
    """Phase ph at element j of a row (rows_body, across_body): its map outputs stored, or its value
    joined to the reduction's accumulator acc."""
    idx = {**oidx, **decompose(src, "j", inner, dims, "ix")}
    em = st.emitter(src, idx)
    if acc is None:
        st.put_maps(src, em, [ph], idx)
    else:
        acc.add(em.value(ph.outputs[0][1]))
    st.keep(src, em)


def _row_result(src, st, ph, acc, oidx, outer, only=None):
    """A row reduction's result: stored (by the thread for which `only` holds, else by each) and held
    for the row's later phases."""
    v = ph.outputs[0][0]
    res = src.assign(acc.result(), "r")
    store = f"{st.layout.store_kept(v, oidx, outer)} = {res}"
    if only is None:
        src.emit(store)
    else:
        with src.block(f"if {only}:"):
            src.emit(store)
    st.rows[id(v)] = res


def tiles_body(src, layout, reduces, maps, kept, reduced, bx, by, split=None):
    """Reduce phases sharing one set of `reduced` axes (kept: the others; each list in enumeration
    order, fastest last) and the map phases riding along (each element visited once).
    split: (slices, chunk, partials): the grid's y blocks each take `chunk` reduced elements (None:
    ceil(nred / slices), counted from the sizes the kernel takes) and
    write their partial results (accumulator dtype) to partials[j][slice * nkept + k] for
    `combine_body` to finish."""
    dims, threads = layout.dims, bx * by
    _prologue(src, threads)
    src.emit("tx = 0" if bx == 1 else f"tx = tid & {bx - 1}")
    src.emit("ty = tid" if bx == 1 else f"ty = tid >> {bx.bit_length() - 1}")
    accs = [Acc(src, ph.lower, ph.outputs[0][0].dtype.name) for ph in reduces]
    shared = _shared(src, accs, WARP if bx == 1 else threads)
    nkept, nred = count(src, dims, kept), count(src, dims, reduced)
    lo, hi = "0", nred
    if split:
        chunk = split[1] if split[1] is not None else src.assign(f"({nred} + {split[0] - 1}) // {split[0]}", "chunk")
        src.emit(f"lo = int64(cuda.blockIdx.y) * {chunk}")
        src.emit(f"hi = lo + {chunk}")               # (no min(): numba.cuda cannot type min of two ints)
        src.emit(f"hi = hi if hi < {nred} else int64({nred})")
        lo, hi = "lo", "hi"
    src.emit("tile = int64(cuda.blockIdx.x)")
    with src.block(f"while tile * {bx} < {nkept}:"):
        src.emit(f"k = tile * {bx} + tx")
        kidx = decompose(src, "k", kept, dims, "o")      # threads past the end read and write nothing
        for a in accs:
            a.begin()
        src.emit(f"r = int64({lo} + ty) if k < {nkept} else int64({hi})")
        with src.block(f"while r < {hi}:"):
            idx = {**kidx, **decompose(src, "r", reduced, dims, "ix")}
            st = Phases(layout, maps + reduces)
            em = st.emitter(src, idx)
            st.put_maps(src, em, maps, idx)
            for a, ph in zip(accs, reduces):
                a.add(em.value(ph.outputs[0][1]))
            src.emit(f"r += {by}")
        for j, (a, ph) in enumerate(zip(accs, reduces)):
            v = ph.outputs[0][0]
            if bx == 1:
                block_allreduce(src, a, threads, shared[a.at])
                total = a.total()
            elif by == 1:                                  # one thread per kept element: its own total
                total = a.total()
            else:
                total = _tree_over_rows(src, a, shared[a.at], bx, by)
            with src.block(f"if ty == 0 and k < {nkept}:"):
                if split:
                    src.emit(f"{split[2][j]}[int64(cuda.blockIdx.y) * {nkept} + k] = {total}")
                else:
                    src.emit(f"{layout.store_kept(v, kidx, kept)} = {a.result(total)}")
        src.emit("tile += cuda.gridDim.x")


def combine_body(src, layout, reduces, kept, slices, partials, threads):
    """The second launch of a split reduction: a thread per kept element joins its `slices` partial
    results (consecutive threads read consecutive partials) and writes the reduction's result
    (threads per block: a constant, or None: the launch's)."""
    dims = layout.dims
    nkept = count(src, dims, kept)
    threads = threads or "cuda.blockDim.x"
    src.emit(f"k = int64(cuda.blockIdx.x) * {threads} + cuda.threadIdx.x")
    with src.block(f"while k < {nkept}:"):
        kidx = decompose(src, "k", kept, dims, "o")
        for ph, part in zip(reduces, partials):
            v = ph.outputs[0][0]
            acc = Acc(src, ph.lower, v.dtype.name)
            acc.begin()
            with src.block(f"for s in range({slices}):"):
                acc.add(f"{part}[s * {nkept} + k]")
            src.emit(f"{layout.store_kept(v, kidx, kept)} = {acc.result()}")
        src.emit(f"k += int64(cuda.gridDim.x) * {threads}")


def _tree_over_rows(src, acc, shared, bx, by):
    """Combine the BY rows of threads' partials in shared memory (pairwise tree); row 0 ends with
    the totals. Returns the source text of this thread's column total (valid in row 0)."""
    src.emit("cuda.syncthreads()")                     # the previous phase's readers are done
    src.emit(f"{shared}[tid] = {acc.var}")
    if acc.lo:
        src.emit(f"{shared}_lo[tid] = {acc.lo}")
    src.emit("cuda.syncthreads()")
    half = by // 2
    while half:
        with src.block(f"if ty < {half}:"):
            if acc.lo:
                two_sum(src, f"{shared}[tid]", f"{shared}_lo[tid]", f"{shared}[tid + {half * bx}]",
                        f"{shared}_lo[tid + {half * bx}]", acc.at)
            else:
                src.emit(f"{shared}[tid] = {combine(acc.how, f'{shared}[tid]', f'{shared}[tid + {half * bx}]', acc.at)}")
        src.emit("cuda.syncthreads()")
        half //= 2
    return acc.total(f"{shared}[tx]", f"{shared}_lo[tx]")
