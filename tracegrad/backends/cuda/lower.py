"""The launches plan.py chose, emitted: each Launch's strategy -> the numba.cuda function its
skeleton (emit/skeletons.py) writes and the CudaKernel that launches it with the planned geometry;
and the flat-buffer layout of compiled programs. Nothing here chooses.

In a compiled program every buffer is one contiguous device array, passed flat; a Load reads it at
offset + sum(i_d * strides[d]) with shapes, strides and offsets as constants (the kernel is
specialized to its signature, as the CPU's is), or, for symbolic sizes, as expressions over the size
arguments the kernel takes after its buffers (sizes.py). The entry is `compile_kernels`.
"""
import functools
import math

from ...ir.kernels import Const, known, loads, postorder, same_shape
from ...strides import contiguous_strides
from ...symint import evaluate
from . import compile as build
from . import sizes as Z
from .emit.expr import Lines
from .emit.reduce import acc_dtype
from .emit.skeletons import across_body, combine_body, map_body, rows_body, tiles_body, vector_map_body
from .plan import Across, Map, Persistent, Rows, Tiled, blocks, plan

def linear(idx, strides, offset=0):
    """Source text of offset + sum(idx[d] * strides[d])."""
    terms = [] if known(offset, 0) else [Z.text(offset)]
    for d, s in enumerate(strides):
        i = idx.get(d, "0")
        if not known(s, 0) and i != "0":
            terms.append(i if known(s, 1) else f"{i} * {Z.text(s)}")
    return " + ".join(terms) or "0"


class Flat:
    """A compiled kernel's buffers: flat arrays named by `args` ({id(Value): name}), constant shapes."""

    def __init__(self, shape, args):
        self.shape, self.args = tuple(shape), args
        self.dims = [Z.text(n) for n in shape]

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
        return known(ld.offset, 0) and same_shape(ld.strides, contiguous_strides(self.shape))

    def reads_row(self, ld, split):
        return known(ld.offset, 0) and same_shape(ld.strides[:split], contiguous_strides(self.shape[:split])) \
            and all(known(s, 0) for s in ld.strides[split:])


class CudaKernel:
    """One launch of a generated kernel: `name`, its `source` (the whole generated file), the
    `buffers` it takes (graph Values, in argument order: each a contiguous device array of the
    Value's shape and dtype), `grid` (blocks: an int, a sizes.Blocks, or (x, y) of them) and `block`
    (threads). Calling it launches the kernel: `k(*arrays, stream=0)`. A split reduction's two launches
    share `scratch`, device arrays of partial results the kernel allocates and passes after the
    buffers. `symbols`: the symbolic sizes it takes (sizes.py), after the buffers, valued by the
    call's sizes `env` {symbol: int}."""

    def __init__(self, name, body, buffers, grid, block, scratch=None, symbols=()):
        self.name, self.buffers, self.grid, self.block = name, list(buffers), grid, block
        self.source = build.module_text(body)
        self._body, self._launch, self.scratch, self.symbols = body, {}, scratch, list(symbols)

    def __call__(self, *arrays, stream=0, env=None):
        if len(arrays) != len(self.buffers):
            raise TypeError(f"CUDA kernel {self.name} takes {len(self.buffers)} buffers, got {len(arrays)}")
        self.launcher(stream, env)(*[a.reshape(a.size) if a.ndim != 1 else a for a in arrays])

    def launcher(self, stream=0, env=None):
        """launch(*flat arrays): the configured launch, taking the buffers as one-axis arrays, with the
        sizes (symbolic kernels: their values in `env`) and the scratch arrays of a split reduction
        bound after them; built once for a kernel of constant sizes, per call's sizes otherwise."""
        launch = self._launch.get(stream)
        if launch is None or self.symbols:
            fn = self._launch.get("fn")
            if fn is None:
                fn = self._launch["fn"] = build.kernel(self._body, self.name, self.block)
            env = env or {}
            launch = fn[Z.grid_at(self.grid, env), self.block, stream]
            after = [env[n] for n in self.symbols] + \
                (self.scratch.arrays(env) if self.scratch else [])
            if after:
                launch = functools.partial(_with_args, launch, after)
            self._launch[stream] = launch
        return launch

    def __repr__(self):
        return f"<CudaKernel {self.name} grid={self.grid} block={self.block}>"


def _with_args(launch, after, *arrays):
    launch(*arrays, *after)


class Scratch:
    """Device arrays of partial results, (size, dtype name) each (a size may be symbolic), allocated at
    first use and again only when a call's sizes need more."""

    def __init__(self, specs):
        self.specs, self._arrays = specs, None

    def arrays(self, env=None):
        need = [max(1, evaluate(n, env or {})) for n, _ in self.specs]
        if self._arrays is None or any(a.size < k for a, k in zip(self._arrays, need)):
            from numba import cuda
            self._arrays = [cuda.device_array(k, d) for k, (_, d) in zip(need, self.specs)]
        return self._arrays


def compile_kernels(kernels, name="forward"):
    """For each kernel of a program (ir/kernels.py objects, in order): the list of CudaKernels that
    compute it, launched in order (loop and reduce_acc kernels), or None (extern and host kernels:
    the caller runs those). Names follow `stage="kernels"`: kernel j of program `name` is
    `{name}_k{j}` (and `{name}_k{j}_{g}` for its g-th launch)."""
    return [lower_kernel(k, f"{name}_k{j}") if k.kind in ("loop", "reduce_acc") else None
            for j, k in enumerate(kernels)]


def lower_kernel(kernel, name):
    """The CudaKernels computing one loop or reduce_acc kernel: plan.py's launches, emitted."""
    return [k for launch in plan(kernel, name) for k in _EMIT[type(launch.strategy)](launch.kernel, launch.name,
                                                                                   launch.strategy)]


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
    """(function text, buffers) of a kernel function whose body `emit(src, layout)` writes; its
    arguments: the buffers, the kernel's symbolic sizes (sizes.py), then `extra`."""
    bufs = _buffers(kernel, phases)
    args = {id(b): f"b{j}" for j, b in enumerate(bufs)}
    src = Lines()
    emit(src, Flat(kernel.shape, args))
    names = [args[id(b)] for b in bufs] + [Z.PREFIX + n for n in _symbols(kernel)] + list(extra)
    return f"def {name}({', '.join(names)}):\n" + src.text(), bufs


def _symbols(kernel):
    """The symbols kernel's code reads: of its sizes, and of counts used as values (a mean's divisor)."""
    counts = [x.value for ph in kernel.phases for _, t in ph.outputs for x in postorder(t) if isinstance(x, Const)]
    return Z.symbols([*kernel.sizes(), *counts])


def _launch(kernel, name, body, bufs, grid, block, scratch=None):
    return CudaKernel(name, body, bufs, grid, block, scratch, _symbols(kernel))


def _map(kernel, name, st):
    order = list(st.order)
    if st.width > 1:
        body, bufs = _source(name, kernel, kernel.phases, lambda src, lay: vector_map_body(
            src, lay, kernel.phases, order, st.threads, st.width))
    else:
        body, bufs = _source(name, kernel, kernel.phases,
                             lambda src, lay: map_body(src, lay, kernel.phases, order, st.threads))
    return [_launch(kernel, name, body, bufs, st.grid, st.threads)]


def _across(kernel, name, st):
    body, bufs = _source(name, kernel, kernel.phases, lambda src, lay: across_body(
        src, lay, kernel.phases, kernel.split, len(kernel.shape), st.across, st.threads))
    return [_launch(kernel, name, body, bufs, st.grid, st.threads)]


def _rows(kernel, name, st):
    body, bufs = _source(name, kernel, kernel.phases, lambda src, lay: rows_body(
        src, lay, kernel.phases, kernel.split, len(kernel.shape), st.threads, st.per_block, st.cache_bytes))
    return [_launch(kernel, name, body, bufs, st.grid, st.threads)]


def _persistent(kernel, name, st):
    """The row kernel, its blocks adding their rows' sums into partials of their own; a join launch
    per group adds the blocks' partials."""
    k, shape = kernel.split, kernel.shape
    ninner = math.prod(shape[k:])
    acc = kernel.accumulated()
    parts = {id(ph): f"p{j}" for j, ph in enumerate(acc)}
    persist = {id(ph): (parts[id(ph)], bool(set(range(k, len(shape))) - set(ph.axes))) for ph in acc}
    most, nblocks = st.blocks, st.blocks               # the blocks: launched, and the partials the join adds
    if isinstance(st.blocks, Z.Blocks):                # counted at the call: FILL_BLOCKS at most
        n = Z.text(st.blocks.n)
        most, nblocks = st.blocks.most, f"({n} if {n} < {st.blocks.most} else {st.blocks.most})"
    scratch = Scratch([(most * (ninner if persist[id(ph)][1] else 1),
                        acc_dtype(ph.lower, ph.outputs[0][0].dtype.name)) for ph in acc])
    body, bufs = _source(name, kernel, kernel.phases, lambda src, lay: rows_body(
        src, lay, kernel.phases, k, len(shape), st.threads, 1, st.cache_bytes, persist), list(parts.values()))
    out = [_launch(kernel, name, body, bufs, st.blocks, st.threads, scratch)]
    for g, ((kept, reduces), jt) in enumerate(zip(st.groups, st.join_threads)):
        nkept = ninner if kept else 1
        label = f"{name}_join" if len(st.groups) == 1 else f"{name}_join{g}"
        body2, bufs2 = _source(label, kernel, list(reduces), lambda src, lay: combine_body(
            src, lay, list(reduces), list(range(k, len(shape))) if kept else [], nblocks,
            [parts[id(ph)] for ph in reduces], jt), list(parts.values()))
        out.append(_launch(kernel, label, body2, bufs2, blocks(nkept, jt), jt, scratch))
    return out


def _tiled(kernel, name, st):
    reduces, maps, kept, reduced = list(st.reduces), list(st.maps), list(st.kept), list(st.reduced)
    if st.slices == 1:
        body, bufs = _source(name, kernel, maps + reduces,
                             lambda src, lay: tiles_body(src, lay, reduces, maps, kept, reduced, st.bx, st.by))
        return [_launch(kernel, name, body, bufs, st.ntiles, st.bx * st.by)]
    nkept = math.prod(kernel.shape[d] for d in kept)
    parts = [f"p{j}" for j in range(len(reduces))]
    scratch = Scratch([(st.slices * nkept, acc_dtype(ph.lower, ph.outputs[0][0].dtype.name)) for ph in reduces])
    body, bufs = _source(name, kernel, maps + reduces, lambda src, lay: tiles_body(
        src, lay, reduces, maps, kept, reduced, st.bx, st.by, (st.slices, st.chunk, parts)), parts)
    body2, bufs2 = _source(name + "_join", kernel, reduces, lambda src, lay: combine_body(
        src, lay, reduces, kept, st.slices, parts, st.join_threads), parts)
    # the second launch takes the buffers of the first's reductions (it reads only the partials)
    return [_launch(kernel, name, body, bufs, (st.ntiles, st.slices), st.bx * st.by, scratch),
            _launch(kernel, name + "_join", body2, bufs2, blocks(nkept, st.join_threads), st.join_threads,
                       scratch)]


_EMIT = {Map: _map, Across: _across, Rows: _rows, Persistent: _persistent, Tiled: _tiled}
