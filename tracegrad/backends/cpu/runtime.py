"""Run a compiled program: buffers planned once, a short list of steps, threads for big loops.

Per call the only Python work is: checking and binding the input arrays, allocating the
output arrays (handed to the user; a small one is reused only once nothing else holds it), one
native call per native segment (a run of kernels, parallel regions and matrix products, see
driver.py and regions.py; called as a builtin, native_call.py), one NumPy call per host step, and
after the call each region's Judge learning from its native timing; a program of native segments
alone runs as generated straight-line code (straight.py). Check mode and profiles run the same
native functions kernel by kernel.
"""
import ctypes
import math
import sys
import time
import weakref

import numpy as np

from ...ir.kernels import Checked, Load, contiguous_strides, postorder
from ...symint import hint
from ...lowering import buffers
from . import forksafe, host
from .driver import blas, gemm_slots, pool_slots, region_slot, sizes_slot, table_size
from .native_call import segment_caller
from .regions import Region
from .scalar import INDEX_ERROR
from .sizes import Binder, at, shape_at, symbolic
from ...lowering.slots import roles
from .plan import streamed
from .stream import empty as aligned_empty
from .straight import HELD as _HELD
from .straight import straight_run
from .threads import _POOL as _POOLS
from .threads import pool

STEP = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)
_addressof, _c_char = ctypes.addressof, ctypes.c_char
# fresh outputs this small are recycled once nothing holds them (see _bind): a fresh array past glibc's mmap
# threshold is new pages each call; W12's seven 192-256 KiB weight gradients made ~190 page faults per step
# (0.6 ms of 22.6 ms one-thread CPU, load 8) at 64 KiB, none at 512 KiB. Larger ones are new arrays each call
# (test_inplace_direct's 1 MiB gradient shows what the general path allocates)
RECYCLE_BYTES = 1 << 19
_getrefcount = sys.getrefcount


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


def viewer(ld, shape, buf_shape=None):
    """How a host step sees buffer ld.buf (of `buf_shape`, default its own) through Load `ld` as an array
    of `shape`: None (the buffer as it is) or (shape, dtype, byte offset, byte strides) of a strided view
    (no copy)."""
    buf_shape = ld.buf.shape if buf_shape is None else buf_shape
    dtype = np.dtype(ld.buf.dtype.np)
    if 0 in shape:          # an empty view: its offset may lie past the buffer (a slice past the end)
        return tuple(shape), dtype, 0, tuple(s * dtype.itemsize for s in contiguous_strides(shape))
    if ld.offset == 0 and tuple(ld.strides) == contiguous_strides(shape) and buf_shape == tuple(shape):
        return None
    return tuple(shape), dtype, ld.offset * dtype.itemsize, tuple(s * dtype.itemsize for s in ld.strides)


class Program:
    """One graph's executable: `run(arrays) -> tuple of output arrays`."""

    def __init__(self, graph, kernels, aliases, slots, chunks, inplace, plan, step_source, engine_ref, symbols=()):
        self.graph, self.kernels, self.engine_ref, self.slots = graph, kernels, engine_ref, slots
        self.n_slots = table_size(len(slots), len(chunks))
        self.table = (ctypes.c_void_p * self.n_slots)()
        if blas() is not None:              # the matrix products' BLAS functions (driver.py)
            for dtype, slot in gemm_slots(len(slots)).items():
                self.table[slot] = blas()[1][dtype]
        self.lock = forksafe.lock()
        self.template = [None] * self.n_slots
        fresh, temps, self.written, self.outputs, self.fresh_outputs = roles(graph, kernels, aliases, slots, inplace)
        # per input: slot, shape (a symbolic one's under the latest sizes: _resize), dtype, then (weakref to
        # the array last bound, its address)
        self.inputs = [[slots[id(v)], None if symbolic(v.shape) else v.shape, np.dtype(v.dtype.np), _dead, 0]
                       for v in graph.inputs]
        # per fresh output: slot, shape, dtype, whether recycled, (the array last used, its address),
        # how it is allocated (a streamed one on a cache line: its kernel's pointer says `align 64`),
        # then (the array used before it, its address)
        stream = streamed(graph, kernels, aliases, slots, inplace)
        self.fresh = [[slot, tuple(v.shape), np.dtype(v.dtype.np),
                       math.prod(map(hint, v.shape)) * np.dtype(v.dtype.np).itemsize <= RECYCLE_BYTES, None, 0,
                       aligned_empty if id(v) in stream else np.empty, None, 0] for slot, v in fresh]
        self.inplace = list(inplace.items())   # (output slot, input slot): written into the input
        steps = list(range(len(kernels)))          # a shared region's kernels run at once: one step
        for run in (c.members for c in chunks.values() if c.members):
            steps[run[0]:run[-1] + 1] = [run[0]] * len(run)
        self.symbols = list(symbols)        # sizes known at the call (sizes.py): bound per call (_resize)
        self.symbolic = any(symbolic(v.shape) for v in (*graph.inputs, *graph.outputs)) or any(
            symbolic(v.shape) for k in kernels for v in k.outputs)     # an output no kernel writes too
        if self.symbolic:
            self.sizes, self.env, self._key = np.zeros(max(1, len(self.symbols)), np.int64), None, None
            # the `sizes` dict of the latest call (its entry's: one object per set of sizes), and each
            # input's symbolic shape (its spec holds the shape under the latest sizes)
            self.given = [None]
            self.input_shapes = [v.shape if symbolic(v.shape) else None for v in graph.inputs]
            self.binder = Binder(graph.inputs)
            self.table[sizes_slot(len(slots))] = self.sizes.ctypes.data
            self.blocks = [[None, users] for _, users in buffers.blocks(kernels, temps, steps)]
            self.fresh_shapes = [v.shape for _, v in fresh]
        else:
            for slot, arr in buffers.plan(kernels, temps, steps).items():    # intermediates: shared when their lives allow
                self.template[slot] = arr
                self.table[slot] = arr.ctypes.data
        self.out_slots = [s for s, shape in self.outputs] if all(sh is None for _, sh in self.outputs) else None
        self.regions = []               # Regions (split kernels, shared runs of small ones) in kernel order
        for r, j in enumerate(sorted(chunks)):
            self.regions.append(Region(chunks[j], self.table, self.n_slots))
            self.table[region_slot(len(slots), r)] = self.regions[-1].address
        # the Judges that learn after a call: those of the regions the latest sizes may run on the pool (a
        # kernel split per call that runs whole at them, a product too small to split, neither runs nor learns)
        self.learns = [region.learn for region in self.regions]
        self.pool_slots, self._pool = pool_slots(len(slots)), None
        self.other = {}                 # kernel index: its step run from Python (NumPy)
        for j, k in enumerate(kernels):
            if not any(j in step[2] for step in plan if step[0] == "native"):
                n = k.node
                ins = [(slots[id(ld.buf)], (ld, i.shape) if self.symbolic else viewer(ld, i.shape))
                       for ld, i in zip(k.args, n.inputs)]
                self.other[j] = ("host", k, ins, slots[id(n.out)])
        self.plan = []                  # a normal call: each native segment at once
        for step in plan:
            if step[0] == "native":     # BLAS in a program without regions: parked from Python
                park = not self.regions and any(kernels[j].kind == "extern" for j in step[2])
                self.plan.append(("call", segment_caller(engine_ref.address(step[1]), self.table), (), park))
            else:
                self.plan.append(self.other[step[1]])
        self.step_source, self._steps = step_source, None
        self.target = host.current().spec        # what step_source was generated for (steps)
        straight = straight_run(self, self.run, _address)
        if straight is not None:         # a small program's call without the loops of Program.run
            self.run, self.run_source = straight
        if any(isinstance(t, Checked) for k in kernels for ph in k.phases for _, tree in ph.outputs
               for t in postorder(tree)) or any(k.kind == "host" and j not in self.other   # scatter.py's
                                                for j, k in enumerate(kernels)):
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
                    with host.pinned(self.target):
                        self.step_engine = compile_module(text + "\n" + step_text)
                    one = STEP(self.step_engine.address(step_name))
                table_ref = ctypes.c_void_p(ctypes.addressof(self.table))
                for j, k in enumerate(self.kernels):
                    steps.append(self.other[j] if j in self.other else
                                 ("call", one, (table_ref, ctypes.c_int64(j)), not self.regions and k.kind == "extern"))
                self._steps = steps
            return self._steps

    def run(self, arrays, timings=None, capture=None, sizes=None):
        """Outputs for `arrays`; with a `timings` list, appends each step's seconds to it; with a
        `capture` dict, fills it with {id(Value): array copy} for every kernel output as the kernel
        wrote it (check mode; intermediates share memory, so later steps overwrite them). Calls from
        several threads take turns: the pointer table and the intermediate buffers are shared."""
        if timings is not None or capture is not None:
            steps = self.steps
            with self.lock:
                cur = self._bind(arrays, sizes)
                self._kernel_by_kernel(steps, cur, timings, capture)
                return self._results(cur)
        with self.lock:
            cur = self._bind(arrays, sizes)
            if self.regions:
                self.use_pool()
            for step in self.plan:
                if step[0] == "call":
                    if step[3] and _POOLS:
                        _POOLS[0].park()            # spinning workers leave the cores to BLAS
                    step[1](*step[2])
                else:
                    self._other(step, cur)
            for learn in self.learns:
                learn()
            if self.out_slots is not None:
                return tuple(map(cur.__getitem__, self.out_slots))
            return self._results(cur)

    def _results(self, cur):
        """The outputs of a call from its arrays by slot (an alias viewed in its own shape)."""
        env = self.env if self.symbolic else {}
        return tuple([cur[s] if shape is None else cur[s].reshape(shape_at(shape, env)) for s, shape in self.outputs])

    def use_pool(self):
        """Point the table at this process's thread pool (started on first use; a forked child's
        own, never the parent's)."""
        p = _POOLS[0] if _POOLS else pool()
        if p is not self._pool:
            self._pool = p
            self.table[self.pool_slots[0]], self.table[self.pool_slots[1]] = p.ctl, p.region

    def _bind(self, arrays, sizes=None):
        """The arrays of this call by slot (inputs, fresh outputs, the planned intermediates), their
        addresses written into the pointer table (where it does not hold them already). A small fresh
        output reuses an array one of the two previous calls used for it when only this program still
        holds it (its tensors, views and saved copies are gone: any of them holds a reference), so a
        hot loop of small calls allocates nothing, also where each call's result replaces the one
        before (a .grad set anew each step: the previous one is still held while this call runs); an
        output whose arrays are both held is a new array, as always."""
        if self.symbolic:
            self._resize(arrays, sizes)
        cur, table = self.template.copy(), self.table
        for spec, a in zip(self.inputs, arrays):
            slot, shape, dtype, ref, ptr = spec
            if a.dtype is not dtype and a.dtype != dtype or shape is not None and a.shape != shape:
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

    def _resize(self, arrays, sizes=None):
        """A program with symbolic sizes: bind the symbols from the input arrays' shapes (sizes.Binder), or
        take `sizes` {symbol: value} where the caller gives them (a graph whose inputs do not bind every
        symbol: a backward's gradient of an input it does not read), and, where they changed since the
        last call, write them into the sizes array and size the fresh outputs, the intermediates' blocks
        and the regions' chunks for them."""
        if sizes is not None and sizes is self.given[0]:
            return                  # the sizes of the call before: _bind checks the inputs' shapes
        values = (self.binder.values(arrays) if sizes is None else
                  (None, *[sizes[n] for n in self.symbols]))           # (None: not the binder's order)
        if values == self._key:
            self.given[0] = sizes
            return
        env = self.binder.env(values) if sizes is None else sizes
        self.binder.check(arrays, env)
        self._key, self.env = values, env
        for spec, shape in zip(self.inputs, self.input_shapes):
            if shape is not None:   # checked against this call's shape, array by array (the last one too)
                spec[1], spec[3] = shape_at(shape, env), _dead
        self.given[0] = sizes
        self.sizes[:len(self.symbols)] = [env.get(n, 0) for n in self.symbols]
        for f, shape in zip(self.fresh, self.fresh_shapes):
            f[1] = shape_at(shape, env)
        for block in self.blocks:
            block[0], arrays_of = buffers.carve(block[1], env, block[0])
            for slot, arr in arrays_of.items():
                self.template[slot] = arr
                self.table[slot] = arr.ctypes.data
        for region in self.regions:
            region.resize(env)
        self.learns[:] = [region.learn for region in self.regions if region.live]

    def _kernel_by_kernel(self, steps, cur, timings, capture):
        if self.regions:
            self.use_pool()
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
            for region in self.regions:
                region.learn()
            if capture is not None:
                capture.update({vid: np.array(cur[slot]) for vid, slot in self.written[j]})

    def _other(self, step, cur):
        """A step run from Python: a host kernel (symbolic sizes: its views and attributes at the call's)."""
        _, k, ins, out = step
        attrs = k.node.attrs
        if self.symbolic:
            ins = [(s, viewer(Load(v[0].buf, *at(self.env, v[0].strides, v[0].offset)), shape_at(v[1], self.env),
                              shape_at(v[0].buf.shape, self.env))) for s, v in ins]
            attrs = at(self.env, attrs)
        args = [cur[s] if v is None else np.ndarray(v[0], v[1], buffer=cur[s], offset=v[2], strides=v[3])
                for s, v in ins]
        if _POOLS:
            _POOLS[0].park()            # spinning workers leave the cores to NumPy
        if k.kind == "extern":
            k.impl(*args, out=cur[out], **attrs)
        else:
            with np.errstate(all="ignore"):
                res = k.impl(*args, **attrs)
            np.copyto(cur[out], res, casting="unsafe")


def _index_checked(prog, run, engine):
    """`run` of a program that gathers by index: IndexError, in eager indexing's words, when a kernel
    met an index out of range (it read element 0 instead, and recorded it: scalar.py's INDEX_ERROR).
    Check mode and profiles run the step module's copy of the kernels: its record too."""
    flags = [(ctypes.c_int64 * 4).from_address(engine.global_address(INDEX_ERROR))]

    def checked(arrays, timings=None, capture=None, sizes=None):
        try:
            return run(arrays, timings, capture) if sizes is None else run(arrays, timings, capture, sizes)
        finally:    # also where a later step raised: the index error came first, and no flag outlives its call
            if len(flags) == 1 and getattr(prog, "step_engine", None) is not None:
                flags.append((ctypes.c_int64 * 4).from_address(prog.step_engine.global_address(INDEX_ERROR)))
            hit = next((list(flag) for flag in flags if flag[0]), None)
            for flag in flags:
                flag[0] = 0
            if hit is not None:
                raise IndexError(f"index {hit[1]} is out of bounds for dimension {hit[2]} with size {hit[3]}")
    return checked
