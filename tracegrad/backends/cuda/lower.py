"""Kernels of the kernel IR (ir/kernels.py) to numba.cuda launches: which skeleton (skeletons.py)
each kernel takes, its launch geometry, and the flat-buffer layout of compiled programs.

In a compiled program every buffer is one contiguous device array, passed flat; a Load reads it at
offset + sum(i_d * strides[d]) with shapes, strides and offsets as constants (the kernel is
specialized to its signature, as the CPU's is). The entry is `compile_kernels`.
"""
import functools
import math

from ...ir.kernels import loads
from ...strides import contiguous_strides
from ...ir.passes.schedule import choose, memory_order, unit_axis
from . import compile as build
from .emit.expr import Lines
from .emit.reduce import acc_dtype, join_of
from .emit.skeletons import across_body, combine_body, map_body, rows_body, tiles_body, vector_map_body, vector_width

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


def pow2(n):
    return 1 << max(0, (int(n) - 1).bit_length())


def warps(n, most):
    """Threads for n parallel items: a multiple of 32, at most `most`."""
    return min(most, max(32, -(-int(n) // 32) * 32))


def linear(idx, strides, offset=0):
    """Source text of offset + sum(idx[d] * strides[d])."""
    terms = [str(offset)] if offset else []
    for d, s in enumerate(strides):
        i = idx.get(d, "0")
        if s and i != "0":
            terms.append(i if s == 1 else f"{i} * {s}")
    return " + ".join(terms) or "0"


class Flat:
    """A compiled kernel's buffers: flat arrays named by `args` ({id(Value): name}), constant shapes."""

    def __init__(self, shape, args):
        self.shape, self.args = tuple(shape), args
        self.dims = [str(n) for n in shape]

    def load(self, ld, idx):
        return f"{self.args[id(ld.buf)]}[{linear(idx, ld.strides, ld.offset)}]"

    def store_full(self, v, idx):
        return f"{self.args[id(v)]}[{linear(idx, contiguous_strides(self.shape))}]"

    def store_kept(self, v, idx, kept):
        strides = [0] * len(self.shape)
        kept = sorted(kept)
        for d, s in zip(kept, contiguous_strides([self.shape[d] for d in kept])):
            strides[d] = s
        return f"{self.args[id(v)]}[{linear(idx, strides)}]"

    def same_element(self, ld, v):
        return not ld.offset and tuple(ld.strides) == contiguous_strides(self.shape)

    def reads_row(self, ld, split):
        return not ld.offset and tuple(ld.strides[:split]) == contiguous_strides(self.shape[:split]) \
            and not any(ld.strides[split:])


class CudaKernel:
    """One launch of a generated kernel: `name`, its `source` (the whole generated file), the
    `buffers` it takes (graph Values, in argument order: each a contiguous device array of the
    Value's shape and dtype), `grid` (blocks: an int, or (x, y)) and `block` (threads). Calling it
    launches the kernel: `k(*arrays, stream=0)`. A split reduction's two launches share `scratch`,
    device arrays of partial results the kernel allocates once and passes after the buffers."""

    def __init__(self, name, body, buffers, grid, block, scratch=None):
        self.name, self.buffers, self.grid, self.block = name, list(buffers), grid, block
        self.source = build.module_text(body)
        self._body, self._launch, self.scratch = body, {}, scratch

    def __call__(self, *arrays, stream=0):
        if len(arrays) != len(self.buffers):
            raise TypeError(f"CUDA kernel {self.name} takes {len(self.buffers)} buffers, got {len(arrays)}")
        self.launcher(stream)(*[a.reshape(a.size) if a.ndim != 1 else a for a in arrays])

    def launcher(self, stream=0):
        """launch(*flat arrays): the configured launch (built once), taking the buffers as one-axis
        arrays, with the scratch arrays of a split reduction bound after them."""
        launch = self._launch.get(stream)
        if launch is None:
            launch = build.kernel(self._body, self.name, self.block)[self.grid, self.block, stream]
            if self.scratch:
                launch = functools.partial(_with_scratch, launch, self.scratch.arrays())
            self._launch[stream] = launch
        return launch

    def __repr__(self):
        return f"<CudaKernel {self.name} grid={self.grid} block={self.block}>"


def _with_scratch(launch, scratch, *arrays):
    launch(*arrays, *scratch)


class Scratch:
    """Device arrays of partial results, (size, dtype name) each, allocated at first use."""

    def __init__(self, specs):
        self.specs, self._arrays = specs, None

    def arrays(self):
        if self._arrays is None:
            from numba import cuda
            self._arrays = [cuda.device_array(n, d) for n, d in self.specs]
        return self._arrays


def compile_kernels(kernels, name="forward"):
    """For each kernel of a program (ir/kernels.py objects, in order): the list of CudaKernels that
    compute it, launched in order (loop and reduce_acc kernels), or None (extern and host kernels:
    the caller runs those). Names follow `stage="kernels"`: kernel j of program `name` is
    `{name}_k{j}` (and `{name}_k{j}_{g}` for its g-th launch)."""
    return [lower_kernel(k, f"{name}_k{j}") if k.kind in ("loop", "reduce_acc") else None
            for j, k in enumerate(kernels)]


def lower_kernel(kernel, name):
    """The CudaKernels computing one loop or reduce_acc kernel (none when it writes no element; a
    reduction over no elements writes its identity)."""
    if all(0 in v.shape for v in kernel.outputs):
        return []
    if kernel.kind == "reduce_acc" and kernel.schedule is not None and kernel.schedule.online:
        maxima, rest = kernel.online_apart()          # the maxima, then the sums that read them
        return lower_kernel(maxima, name) + lower_kernel(rest, f"{name}_sums")
    if kernel.kind == "loop" and kernel.accumulated():
        fused = _persistent(kernel, name)
        if fused is not None:
            return fused
        rows, sums = kernel.apart()                      # a row kernel's sums over its rows: a launch after
        rows.schedule = choose(rows) if len(rows.shape) > 1 and rows.phases else None   # its own walk
        return lower_kernel(rows, name) + lower_kernel(sums, f"{name}_sums")
    if kernel.kind == "reduce_acc":
        return _tiled(kernel, name)
    if all(ph.kind == "map" for ph in kernel.phases):
        return [_map(kernel, name)]
    sch = kernel.schedule
    if sch is not None and sch.across is not None:
        return [_rows(kernel, name, across=sch.across)]
    return [_rows(kernel, name)]


def _buffers(kernel, phases):
    out, seen = [], set()
    for ph in phases:
        for v, t in ph.outputs:
            for x in [ld.buf for ld in loads(t)] + [v]:
                if id(x) not in seen:
                    seen.add(id(x))
                    out.append(x)
    return out


def _source(name, kernel, phases, emit, extra=()):
    """(function text, buffers) of a kernel function whose body `emit(src, layout)` writes; `extra`:
    names of arguments after the buffers."""
    bufs = _buffers(kernel, phases)
    args = {id(b): f"b{j}" for j, b in enumerate(bufs)}
    src = Lines()
    emit(src, Flat(kernel.shape, args))
    head = f"def {name}({', '.join([args[id(b)] for b in bufs] + list(extra))}):\n"
    return head + src.text(), bufs


def element_order(kernel):
    """The axes a map kernel walks, outermost first: its schedule's element loops, else natural."""
    if kernel.schedule is None:
        return list(range(len(kernel.shape)))
    order = []
    for d, _ in kernel.schedule.levels:
        if d not in order:
            order.append(d)
    return order


def _map(kernel, name):
    n = math.prod(kernel.shape)
    width = vector_width(Flat(kernel.shape, {}), kernel.phases, n)
    threads = warps(-(-n // width), MAP_THREADS)
    if width > 1:
        body, bufs = _source(name, kernel, kernel.phases, lambda src, lay: vector_map_body(
            src, lay, kernel.phases, element_order(kernel), threads, width))
    else:
        body, bufs = _source(name, kernel, kernel.phases,
                             lambda src, lay: map_body(src, lay, kernel.phases, element_order(kernel), threads))
    return CudaKernel(name, body, bufs, min(-(-n // (threads * width)), MAX_GRID), threads)


def _rows(kernel, name, across=None):
    k, shape = kernel.split, kernel.shape
    nrows, ninner = math.prod(shape[:k]), math.prod(shape[k:])
    if across is not None:
        threads = warps(nrows, MAP_THREADS)
        body, bufs = _source(name, kernel, kernel.phases, lambda src, lay: across_body(
            src, lay, kernel.phases, k, len(shape), across, threads))
        return CudaKernel(name, body, bufs, min(-(-nrows // threads), MAX_GRID), threads)
    threads = min(ROW_THREADS, max(32, pow2(-(-ninner // PER_THREAD))))
    per_block = min(WARP_ROWS, nrows) if threads == 32 else 1     # short rows: a warp each
    body, bufs = _source(name, kernel, kernel.phases, lambda src, lay: rows_body(
        src, lay, kernel.phases, k, len(shape), threads * per_block, per_block, ROW_CACHE_BYTES))
    return CudaKernel(name, body, bufs, min(-(-nrows // per_block), MAX_GRID), threads * per_block)


def _persistent(kernel, name):
    """A row kernel with sums over all its rows (a layer norm's loss, its backward's dW and db) as
    persistent row kernel, FILL_BLOCKS blocks taking the rows in turn, each adding its rows into
    accumulators of its own and writing its partial sums; a join launch per set of kept axes adds
    the blocks' partials (no second pass over the rows). None where the sums are not float sums that
    keep all the row's axes or none, or the kernel walks columns (schedule.across)."""
    k, shape = kernel.split, kernel.shape
    if kernel.schedule is not None and kernel.schedule.across is not None:
        return None
    nrows, ninner = math.prod(shape[:k]), math.prod(shape[k:])
    inner, groups = set(range(k, len(shape))), {}
    for ph in kernel.accumulated():
        kept = inner - set(ph.axes)
        if join_of(ph.lower) != "+" or ph.outputs[0][0].dtype.name not in ("float16", "float32", "float64") \
                or kept not in (set(), inner) or len(ph.outputs) != 1:
            return None
        groups.setdefault(bool(kept), []).append(ph)
    threads = min(ROW_THREADS, max(32, pow2(-(-ninner // PER_THREAD))))
    nblocks = min(nrows, FILL_BLOCKS)
    acc = kernel.accumulated()
    parts = {id(ph): f"p{j}" for j, ph in enumerate(acc)}
    persist = {id(ph): (parts[id(ph)], bool(inner - set(ph.axes))) for ph in acc}
    scratch = Scratch([(nblocks * (ninner if persist[id(ph)][1] else 1),
                        acc_dtype(ph.lower, ph.outputs[0][0].dtype.name)) for ph in acc])
    body, bufs = _source(name, kernel, kernel.phases, lambda src, lay: rows_body(
        src, lay, kernel.phases, k, len(shape), threads, 1, ROW_CACHE_BYTES, persist), list(parts.values()))
    out = [CudaKernel(name, body, bufs, nblocks, threads, scratch)]
    for g, (kept, reduces) in enumerate(groups.items()):
        nkept = ninner if kept else 1
        jt = warps(nkept, MAP_THREADS)
        label = f"{name}_join" if len(groups) == 1 else f"{name}_join{g}"
        body2, bufs2 = _source(label, kernel, reduces, lambda src, lay: combine_body(
            src, lay, reduces, sorted(inner) if kept else [], nblocks, [parts[id(ph)] for ph in reduces], jt),
            list(parts.values()))
        out.append(CudaKernel(label, body2, bufs2, min(-(-nkept // jt), MAX_GRID), jt, scratch))
    return out


def _tiled(kernel, name):
    """A reduce_acc kernel: launches for each distinct set of reduced axes (the map phases ride with
    the first), none for reductions into empty outputs (their space is empty: so are the maps)."""
    groups = {}
    for ph in kernel.phases:
        if ph.kind == "reduce" and not all(0 in v.shape for v, _ in ph.outputs):
            groups.setdefault(tuple(sorted(ph.axes)), []).append(ph)
    maps = [ph for ph in kernel.phases if ph.kind == "map"]
    out = []
    for g, (axes, reduces) in enumerate(groups.items()):
        label = name if len(groups) == 1 else f"{name}_{g}"
        out += tiled_launches(kernel, label, reduces, maps if g == 0 else [])
    return out


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


def tiled_launches(kernel, name, reduces, maps):
    shape, axes = kernel.shape, set(reduces[0].axes)
    reads = [ld for ph in reduces + maps for _, t in ph.outputs for ld in loads(t)]
    big = max(reads, key=lambda ld: math.prod(ld.buf.shape) * ld.buf.dtype.itemsize, default=None)
    kept, reduced, bx, by = tile_geometry(shape, axes, big.strides if big is not None else None)
    nkept, nred = math.prod(shape[d] for d in kept), math.prod(shape[d] for d in reduced)
    ntiles = min(-(-nkept // bx), MAX_GRID)
    slices, chunk = slices_of(ntiles, nred, by)
    if slices == 1:
        body, bufs = _source(name, kernel, maps + reduces,
                             lambda src, lay: tiles_body(src, lay, reduces, maps, kept, reduced, bx, by))
        return [CudaKernel(name, body, bufs, ntiles, bx * by)]
    parts = [f"p{j}" for j in range(len(reduces))]
    scratch = Scratch([(slices * nkept, acc_dtype(ph.lower, ph.outputs[0][0].dtype.name)) for ph in reduces])
    body, bufs = _source(name, kernel, maps + reduces, lambda src, lay: tiles_body(
        src, lay, reduces, maps, kept, reduced, bx, by, (slices, chunk, parts)), parts)
    threads = warps(nkept, MAP_THREADS)
    body2, bufs2 = _source(name + "_join", kernel, reduces, lambda src, lay: combine_body(
        src, lay, reduces, kept, slices, parts, threads), parts)
    # the second launch takes the buffers of the first's reductions (it reads only the partials)
    return [CudaKernel(name, body, bufs, (ntiles, slices), bx * by, scratch),
            CudaKernel(name + "_join", body2, bufs2, min(-(-nkept // threads), MAX_GRID), threads, scratch)]
