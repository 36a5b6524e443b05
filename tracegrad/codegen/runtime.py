"""Run a compiled program: buffers planned once, a short list of steps, threads for big loops.

Per call the only Python work is: checking and binding the input arrays, allocating the
output arrays (handed to the user; a small one is reused only once nothing else holds it), one
native call per native segment (a run of kernels and matrix products, see driver.py; called as a
builtin, native_call.py), the thread pool's bookkeeping for kernels large enough to split into
chunks, and one NumPy call per host step; a small program's run is generated straight-line code
(straight.py). Check mode and profiles run the same native functions kernel by kernel.
"""
import ast
import ctypes
import math
import sys
import time
import weakref

import numpy as np

from ..ir.kernels import Checked, contiguous_strides, postorder
from . import buffers, forksafe
from .driver import blas, gemm_slots
from .native_call import segment_caller
from .scalar import INDEX_ERROR
from .slots import roles
from .stream import empty as aligned_empty
from .stream import streamed
from .straight import HELD as _HELD
from .straight import straight_run
from .threads import _POOL as _POOLS
from .threads import Judge, pool

STEP = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)
_addressof, _c_char = ctypes.addressof, ctypes.c_char
PARALLEL_MIN_WORK = 1 << 20   # element-ops: a sleeping worker takes ~80 us to wake, a spinning one ~5 us
MAX_CHUNKS = 64               # chunks of one split kernel (a quarter of PARALLEL_MIN_WORK each, at least)
ACC_CHUNKS = 16               # chunks of one that accumulates over its outer loop (see _Chunks)


RECYCLE_BYTES = 1 << 16       # fresh outputs this small are recycled once nothing holds them (see _bind)
_getrefcount = sys.getrefcount


def work(kernel):
    """A rough cost of a loop kernel: elements times ops, transcendentals (the primitive's cost)
    counting 8."""
    return math.prod(kernel.shape) * sum(8 if cost == "transcendental" else 1 for cost in kernel.costs())


def splits(kernel):
    """Whether a loop or reduce_acc kernel is large enough to split over the thread pool."""
    return kernel.parallel_extent() > 1 and work(kernel) >= PARALLEL_MIN_WORK


def _dead():
    return None


def _address(a):
    """The address of contiguous array `a`'s data (a.ctypes.data costs three times more)."""
    try:
        return _addressof(_c_char.from_buffer(a))
    except (TypeError, ValueError, BufferError):     # read-only or empty
        return a.ctypes.data


def _free(a, shape, dtype):
    """Whether a fresh-output spec's array `a` (passed straight from the spec) is free to reuse."""
    return a is not None and _getrefcount(a) == _HELD and a.flags.writeable and a.shape == shape and \
        a.dtype is dtype


def viewer(ld, shape):
    """How a host step sees buffer ld.buf through Load `ld` as an array of `shape`: None (the buffer
    as it is) or (shape, dtype, byte offset, byte strides) of a strided view (no copy)."""
    if ld.offset == 0 and tuple(ld.strides) == contiguous_strides(shape) and ld.buf.shape == tuple(shape):
        return None
    dtype = np.dtype(ld.buf.dtype.np)
    return tuple(shape), dtype, ld.offset * dtype.itemsize, tuple(s * dtype.itemsize for s in ld.strides)


class Program:
    """One graph's executable: `run(arrays) -> tuple of output arrays`."""

    def __init__(self, graph, kernels, aliases, slots, names, inplace, plan, step_source, engine_ref):
        self.graph, self.kernels, self.engine_ref, self.slots = graph, kernels, engine_ref, slots
        self.n_slots = len(slots) + 2
        self.table = (ctypes.c_void_p * self.n_slots)()
        if blas() is not None:              # the matrix products' BLAS functions (driver.py)
            for dtype, slot in gemm_slots(len(slots)).items():
                self.table[slot] = blas()[1][dtype]
        self.lock = forksafe.lock()
        self.template = [None] * self.n_slots
        fresh, temps, self.written, self.outputs, self.fresh_outputs = roles(graph, kernels, aliases, slots, inplace)
        # per input: slot, shape, dtype, then (weakref to the array last bound, its address)
        self.inputs = [[slots[id(v)], v.shape, np.dtype(v.dtype.np), _dead, 0] for v in graph.inputs]
        # per fresh output: slot, shape, dtype, whether recycled, (the array last used, its address),
        # how it is allocated (a streamed one on a cache line: its kernel's pointer says `align 64`),
        # then (the array used before it, its address)
        stream = streamed(graph, kernels, aliases, slots, inplace)
        self.fresh = [[slot, tuple(v.shape), np.dtype(v.dtype.np),
                       math.prod(v.shape) * np.dtype(v.dtype.np).itemsize <= RECYCLE_BYTES, None, 0,
                       aligned_empty if id(v) in stream else np.empty, None, 0] for slot, v in fresh]
        self.inplace = list(inplace.items())   # (output slot, input slot): written into the input
        for slot, arr in buffers.plan(kernels, temps).items():    # intermediates: shared when their lives allow
            self.template[slot] = arr
            self.table[slot] = arr.ctypes.data
        self.out_slots = [s for s, shape in self.outputs] if all(sh is None for _, sh in self.outputs) else None
        table_ref = ctypes.c_void_p(ctypes.addressof(self.table))
        self.other = {}                 # kernel index: its step run from Python (threads, NumPy)
        for j, k in enumerate(kernels):
            if j in names:
                self.other[j] = ("chunks", _Chunks(self, k, slots, engine_ref.address(names[j]), k.parallel_extent()))
            elif not any(j in step[2] for step in plan if step[0] == "native"):
                n = k.node
                ins = [(slots[id(ld.buf)], viewer(ld, i.shape)) for ld, i in zip(k.args, n.inputs)]
                self.other[j] = ("host", k, ins, slots[id(n.out)])
        self.plan = []                  # a normal call: each native segment at once
        for step in plan:
            if step[0] == "native":
                blas_call = any(kernels[j].kind == "extern" for j in step[2])
                self.plan.append(("call", segment_caller(engine_ref.address(step[1]), self.table), (), blas_call))
            else:
                self.plan.append(self.other[step[1]])
        self.step_source, self._steps = step_source, None
        straight = straight_run(self, self.run, _address)
        if straight is not None:         # a small program's call without the loops of Program.run
            self.run, self.run_source = straight
        if any(isinstance(t, Checked) for k in kernels for ph in k.phases for _, tree in ph.outputs
               for t in postorder(tree)):
            self.run = _index_checked(self, self.run, engine_ref)

    @property
    def steps(self):
        """Kernel by kernel (check mode, profiles): the native kernels through the program's step
        function, compiled on first use (a module of its own: a normal call never pays for it)."""
        with self.lock:
            if self._steps is None:
                from .engine import compile_module
                text, step_text, step_name = self.step_source
                steps, one = [], None
                if step_text is not None:
                    self.step_engine = compile_module(text + "\n" + step_text)
                    one = STEP(self.step_engine.address(step_name))
                table_ref = ctypes.c_void_p(ctypes.addressof(self.table))
                for j, k in enumerate(self.kernels):
                    steps.append(self.other[j] if j in self.other else
                                 ("call", one, (table_ref, ctypes.c_int64(j)), k.kind == "extern"))
                self._steps = steps
            return self._steps

    def run(self, arrays, timings=None, capture=None):
        """Outputs for `arrays`; with a `timings` list, appends each step's seconds to it; with a
        `capture` dict, fills it with {id(Value): array copy} for every kernel output as the kernel
        wrote it (check mode; intermediates share memory, so later steps overwrite them). Calls from
        several threads take turns: the pointer table and the intermediate buffers are shared."""
        if timings is not None or capture is not None:
            steps = self.steps
            with self.lock:
                cur = self._bind(arrays)
                self._kernel_by_kernel(steps, cur, timings, capture)
                return tuple([cur[s] if shape is None else cur[s].reshape(shape) for s, shape in self.outputs])
        with self.lock:
            cur = self._bind(arrays)
            for step in self.plan:
                if step[0] == "call":
                    if step[3] and _POOLS:
                        _POOLS[0].park()            # spinning workers leave the cores to BLAS
                    step[1](*step[2])
                else:
                    self._other(step, cur)
            if self.out_slots is not None:
                return tuple(map(cur.__getitem__, self.out_slots))
            return tuple([cur[s] if shape is None else cur[s].reshape(shape) for s, shape in self.outputs])

    def _bind(self, arrays):
        """The arrays of this call by slot (inputs, fresh outputs, the planned intermediates), their
        addresses written into the pointer table (where it does not hold them already). A small fresh
        output reuses an array one of the two previous calls used for it when only this program still
        holds it (its tensors, views and saved copies are gone: any of them holds a reference), so a
        hot loop of small calls allocates nothing, also where each call's result replaces the one
        before (a .grad set anew each step: the previous one is still held while this call runs); an
        output whose arrays are both held is a new array, as always."""
        cur, table = self.template.copy(), self.table
        for spec, a in zip(self.inputs, arrays):
            slot, shape, dtype, ref, ptr = spec
            if a.dtype is not dtype and a.dtype != dtype or a.shape != shape:
                raise ValueError(f"compiled kernel input: expected {dtype}{list(shape)}, got {a.dtype}{list(a.shape)}")
            if not a.flags.c_contiguous:
                a = np.ascontiguousarray(a)
            if ref() is not a:          # an array's data never moves: the table holds the last one's address
                spec[3:] = weakref.ref(a), _address(a)
                table[slot] = spec[4]
            cur[slot] = a
        for o, i in self.inplace:
            cur[o] = cur[i]
            table[o] = table[i]
        for f in self.fresh:            # the table holds the address of f[4], the array last used
            slot, shape, dtype = f[0], f[1], f[2]
            if _free(f[4], shape, dtype):       # the previous call's array, which nothing else holds now
                a = f[4]
            elif _free(f[7], shape, dtype):     # the array of the call before it
                f[4:6], f[7:9] = f[7:9], f[4:6]
                a, table[slot] = f[4], f[5]
            else:
                a = f[6](shape, dtype)
                table[slot] = ptr = _address(a)
                if f[3]:
                    f[7:9], f[4:6] = f[4:6], (a, ptr)
            cur[slot] = a
        return cur

    def _kernel_by_kernel(self, steps, cur, timings, capture):
        for j, step in enumerate(steps):
            if timings is not None:
                t0 = time.perf_counter()
            if step[0] == "call":
                if step[3] and _POOLS:
                    _POOLS[0].park()
                step[1](*step[2])
            else:
                self._other(step, cur)
            if timings is not None:
                timings.append(time.perf_counter() - t0)
            if capture is not None:
                capture.update({vid: np.array(cur[slot]) for vid, slot in self.written[j]})

    def _other(self, step, cur):
        """A step run from Python: a kernel split over the threads, or a host kernel."""
        if step[0] == "chunks":
            step[1].run(self.table, cur)
            return
        _, k, ins, out = step
        args = [cur[s] if v is None else np.ndarray(v[0], v[1], buffer=cur[s], offset=v[2], strides=v[3])
                for s, v in ins]
        if _POOLS:
            _POOLS[0].park()            # spinning workers leave the cores to NumPy
        if k.kind == "extern":
            k.impl(*args, out=cur[out], **k.node.attrs)
        else:
            with np.errstate(all="ignore"):
                res = k.impl(*args, **k.node.attrs)
            np.copyto(cur[out], res, casting="unsafe")


def _index_checked(prog, run, engine):
    """`run` of a program that gathers by index: IndexError, in eager indexing's words, when a kernel
    met an index out of range (it read element 0 instead, and recorded it: scalar.py's INDEX_ERROR).
    Check mode and profiles run the step module's copy of the kernels: its record too."""
    flags = [(ctypes.c_int64 * 4).from_address(engine.global_address(INDEX_ERROR))]

    def checked(arrays, timings=None, capture=None):
        out = run(arrays, timings, capture)
        if len(flags) == 1 and getattr(prog, "step_engine", None) is not None:
            flags.append((ctypes.c_int64 * 4).from_address(prog.step_engine.global_address(INDEX_ERROR)))
        for flag in flags:
            if flag[0]:
                _, i, dim, size = list(flag)
                flag[0] = 0
                raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {size}")
        return out
    return checked


class _Chunks:
    """A kernel run as chunks of its outer loop, spread over the thread pool. The chunks follow from
    the kernel's size alone, never from the thread count or from which thread ran which chunk, so
    results are the same on any machine and under any load. A kernel that accumulates over its outer
    loop (Kernel.partials: a reduce_acc kernel, a row kernel's sums over rows, reductions across a
    unit-stride kept axis whose threads split the rows) has chunk 0 reduce
    into the real outputs and chunk i > 0 into row i - 1 of a private array per output (its own
    pointer table); the partials are then joined by one NumPy reduction per output. Such a kernel
    has at most ACC_CHUNKS chunks: each private partial costs a copy of the pointer table and its
    share of the join on every call."""

    def __init__(self, prog, kernel, slots, fn, extent):
        n = max(2, work(kernel) * 4 // PARALLEL_MIN_WORK)
        reduced = [(v, _combiner(ph.lower)) for ph in kernel.partials() for v, _ in ph.outputs]
        if reduced:                       # private partials: at most a sixteenth of the input's size
            n = min(n, ACC_CHUNKS, 1 + math.prod(kernel.shape) // (16 * max(math.prod(v.shape) for v, _ in reduced)))
        self.fn, self.n = fn, min(n, extent, MAX_CHUNKS)
        self.bounds = np.array([extent * i // self.n for i in range(self.n + 1)], np.int64)
        self.tables = (ctypes.c_void_p * self.n)(*[ctypes.addressof(prog.table)] * self.n)
        self.outs = [(slots[id(v)], op) for v, op in reduced]
        privates = self.n - 1 if self.outs else 0
        self.partials = [_partials(privates, v) for v, _ in reduced]
        self.private = []               # (pointer table, [(slot, address of its partial)])
        for i in range(privates):
            table = (ctypes.c_void_p * max(1, prog.n_slots))()
            self.private.append((table, [(slot, p[i:i + 1].ctypes.data)
                                         for (slot, _), p in zip(self.outs, self.partials)]))
            self.tables[i + 1] = ctypes.addressof(table)
        self.nbytes = ctypes.sizeof(prog.table)
        self.judge = Judge()

    def run(self, table, cur):
        for t, addresses in self.private:
            ctypes.memmove(t, table, self.nbytes)
            for slot, address in addresses:
                t[slot] = address
        pool().run(self.fn, self.tables, self.bounds, self.n, self.judge)
        if not self.private:
            return
        for (slot, combine), parts in zip(self.outs, self.partials):
            out = cur[slot]
            if combine is np.add and out.ndim == 0 and out.dtype.kind == "f":    # one sum: exactly
                out[...] = _fsum([out.item()] + parts.ravel().tolist())
            elif combine is np.add and out.dtype == np.float32 and len(parts) > 3:   # many: in float64
                out[...] = parts.sum(0, dtype=np.float64) + out
            else:
                combine(out, combine.reduce(parts, axis=0), out=out)


def _fsum(xs):
    """math.fsum, or (inf and -inf among xs: fsum raises; or a sum past the float64 range) their plain
    sum, nan or inf as eager's."""
    try:
        return math.fsum(xs)
    except (ValueError, OverflowError):
        return float(np.sum(xs))


def _partials(n, v):
    """n private partial results of Value v, as rows of one array (a view of shape (n,) + v.shape); a
    cache line apart, so that threads writing neighbouring rows never share one."""
    size, dtype = math.prod(v.shape), np.dtype(v.dtype.np)
    return np.empty((n, size + 64 // dtype.itemsize), dtype)[:, :size].reshape((n,) + tuple(v.shape))


def _combiner(lower):
    """The NumPy ufunc that joins two partial results of a reduction whose lowering is `lower`."""
    tree = ast.parse(lower, mode="eval").body
    if isinstance(tree, ast.BinOp) and isinstance(tree.op, ast.Add):
        return np.add
    if isinstance(tree, ast.Call) and isinstance(getattr(np, tree.func.id, None), np.ufunc):
        return getattr(np, tree.func.id)         # the vocabulary's maximum/minimum are NumPy's
    raise NotImplementedError(f"the runtime cannot combine partial reductions of lowering {lower!r}")
