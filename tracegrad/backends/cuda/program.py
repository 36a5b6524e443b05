"""Run a compiled program on the GPU: one graph's kernels, lowered to numba.cuda (loop and reduce_acc
kernels, this package) or run by the device library (matrix products, indexing, ...), over device
buffers planned once and reused by every call — the device counterpart of backends/cpu/runtime.py.

Per call the Python work is: checking the input arrays, allocating the output arrays (handed to the
user, so never reused), and one launch per kernel. Nothing is copied between host and device
(check mode aside). This module knows numba.cuda's launch interface and nothing about tensors: the
device operations (allocation, strided views, library kernels) are handed in by the caller (jit).

Symbolic sizes (sizes.py): a program of a graph traced with symbols is built once; each call binds
them (the caller's `sizes`, else the input arrays' dims), and where they changed since the last call
sizes the fresh outputs, the intermediates and each launch (grid, size arguments, partials) anew.
"""
import math
import time

from ...strides import contiguous_strides
from ...locks import lock
from ...lowering import buffers
from ...lowering.slots import per_graph, roles
from ...symint import free_symbols, is_sym
from .sizes import at


class DeviceOps:
    """What a device program needs from the device library, as plain functions:
    empty(shape, dtype), maker(shape, dtype) -> make() -> (empty(shape, dtype), the same memory as
    one axis), view(arr, shape, strides, offset, dtype=None), row_major(arr),
    contiguous(arr) (a row-major copy), to_host(arr) (a NumPy copy, for check mode),
    library(kernel) -> fn(args) for an extern or host kernel (args: strided views of its inputs;
    fn returns the result, a new device array), or raises NotImplementedError naming what is missing,
    synchronize(), and timer() -> (start, stop, elapsed) callables: elapsed() is the milliseconds
    between start() and stop() once synchronized (CUDA events)."""

    def __init__(self, **fns):
        self.__dict__.update(fns)


def unsupported(kernel, why):
    """The compile-time error for a kernel the GPU cannot run (no silent host fallback)."""
    op = kernel.node.op if kernel.node is not None else "+".join(kernel.ops())
    ins = ", ".join(f"{ld.buf.type}" for ld in kernel.reads) or "no inputs"
    return NotImplementedError(
        f"backend='cuda': op {op!r} ({ins}) has no CUDA implementation on cuda:0 ({why}); tracegrad does not "
        f"copy it to the host behind your back. Compute it outside the compiled function, or compile for the "
        f"cpu (tensors on cpu, backend='llvm')")


class DeviceProgram:
    """One graph's executable on the device: `run(arrays) -> tuple of output device arrays`.
    `launchers[id(kernel)]`: the CudaKernels (lower.py) computing a loop or reduce_acc kernel, in
    launch order: each takes the arrays of its `.buffers` (Values) and has its `.source` text."""

    def __init__(self, graph, kernels, aliases, slots, inplace, launchers, ops):
        self.graph, self.kernels, self.ops, self.slots = graph, kernels, ops, slots
        self.lock = lock()
        self.launchers = launchers
        fresh, temps, self.written, self.outputs, self.fresh_outputs = roles(graph, kernels, aliases, slots, inplace)
        self.inputs = [(slots[id(v)], v.shape, v.dtype.np) for v in graph.inputs]
        self.inplace = list(inplace.items())
        values = [*graph.inputs, *graph.outputs, *(v for k in kernels for v in k.outputs)]
        self.symbols = set().union(*(free_symbols(v.shape) for v in values),
                                   *(ck.symbols for cks in launchers.values() for ck in cks))
        self.symbolic = bool(self.symbols)
        self.env, self._sized_for, self._fresh = {}, None, [(slot, v.shape, v.dtype.np) for slot, v in fresh]
        self._blocks = [[None, users] for _, users in buffers.blocks(kernels, temps)]   # shared when lives allow
        self.template, self.flat_template = [None] * len(slots), [None] * len(slots)
        if not self.symbolic:
            self._size({})
        self.steps, self.plan = [], None
        for k in kernels:
            if k.kind in ("loop", "reduce_acc"):
                self.steps.append(("launch", [(ck, [slots[id(v)] for v in ck.buffers]) for ck in launchers[id(k)]],
                                   None, None))
            else:
                ins = [(slots[id(ld.buf)], ld, i.shape) for ld, i in zip(k.args, k.node.inputs)]
                self.steps.append(("library", ops.library(k), ins, slots[id(k.node.out)]))

    def sources(self):
        """[(kernel index, kind, numba.cuda source text or the library call)] of every step."""
        out = []
        for j, k in enumerate(self.kernels):
            cks = self.launchers.get(id(k))
            text = "\n".join(f"# launch {ck.name}: grid={ck.grid} block={ck.block}\n{ck.source}" for ck in cks) \
                if cks is not None else f"# {k.node.op}: run by the device library (tracegrad/cuda)"
            out.append((j, k.kind, text or "# empty space: no launch"))
        return out

    def run(self, arrays, timings=None, capture=None, sizes=None):
        """Outputs for `arrays` (device arrays); with a `timings` list, appends each step's seconds
        (CUDA events); with a `capture` dict, fills it with {id(Value): NumPy copy} of every kernel
        output as the kernel wrote it (check mode). `sizes`: the symbols' values {name: int} of a
        symbolic program (default: read from the inputs' dims). Calls from several threads take turns."""
        with self.lock:
            if self.symbolic:
                self._size(self._sizes_of(arrays, sizes))
            if timings is None and capture is None:
                return self._run_plain(arrays)
            return self._run(arrays, timings, capture)

    def _sizes_of(self, arrays, sizes):
        """The call's symbol values: `sizes`, else each input dim that is a bare symbol (ValueError where
        a symbol the program reads is bound by no input: its caller must pass `sizes`)."""
        if sizes is not None:
            return dict(sizes)
        env = {}
        for (_, shape, _), a in zip(self.inputs, arrays):
            for d, n in zip(getattr(a, "shape", ()), shape):
                if is_sym(n) and len(n.expr.terms) == 1 and n.expr.terms[0][1] == 1 and \
                        len(n.expr.terms[0][0]) == 1 and n.expr.terms[0][0][0][1] == 1:
                    env[n.expr.terms[0][0][0][0]] = d
        free = self.symbols - set(env)
        if free:
            raise ValueError(f"compiled program {self.graph.name}: no input binds the sizes {sorted(free)}; "
                             f"pass run(arrays, sizes={{name: int}})")
        return env

    def _size(self, env):
        """Size the fresh outputs and the intermediates for the symbols' values `env` (where they changed)."""
        if env == self._sized_for:
            return
        self.env, self._sized_for, self.plan, ops = env, dict(env), None, self.ops
        self.fresh = [(slot, ops.maker(at(env, shape), dtype)) for slot, shape, dtype in self._fresh]
        for block in self._blocks:
            shapes = [(slot, at(env, v.shape), v.dtype) for slot, v in block[1]]
            need = max((math.prod(sh) * dt.itemsize for _, sh, dt in shapes), default=0)
            if block[0] is None or block[0].size < need:
                block[0] = ops.empty((need,), "uint8")
            for slot, sh, dt in shapes:
                self.template[slot] = ops.view(block[0], sh, contiguous_strides(sh), 0, dt.np)
                self.flat_template[slot] = _flat(self.template[slot])

    def _bind(self, arrays):
        """(cur, flat): each slot's array, and the same memory as one axis (as the generated kernels
        take it), for this call's input arrays and fresh outputs."""
        cur, flat = self.template.copy(), self.flat_template.copy()
        for (slot, shape, dtype), a in zip(self.inputs, arrays):
            shape = at(self.env, shape)
            seen = a.__dict__.get("_tg_flat")        # a device array's layout never changes: checked once
            if seen is None or seen[0] != shape or seen[1] != dtype:
                a, seen = self._check_input(a, shape, dtype)
            cur[slot], flat[slot] = a, seen[2]
        for o, i in self.inplace:
            cur[o], flat[o] = cur[i], flat[i]
        for slot, make in self.fresh:
            cur[slot], flat[slot] = make()
        return cur, flat

    def _check_input(self, a, shape, dtype):
        if a.dtype != dtype or tuple(a.shape) != shape:
            raise ValueError(f"compiled kernel input: expected {dtype}{list(shape)}, got {a.dtype}{list(a.shape)}")
        if self.ops.row_major(a):
            seen = a._tg_flat = (shape, dtype, _flat(a))
            return a, seen
        a = self.ops.contiguous(a)
        return a, (shape, dtype, _flat(a))

    def _run_plain(self, arrays):
        """run() without timings or capture: the launches, bound once, one after the other."""
        plan = self.plan
        if plan is None:
            plan = []
            for kind, fn, ins, out in self.steps:
                if kind == "launch":
                    plan += [(ck.launcher(env=self.env), slots, None, None) for ck, slots in fn]
                else:
                    plan.append((None, fn, ins, out))
            self.plan = plan
        cur, flat = self._bind(arrays)
        for launch, slots, ins, out in plan:
            if launch is not None:
                launch(*map(flat.__getitem__, slots))
            else:
                self._library(cur, flat, slots, ins, out)
        return self._results(cur)

    def _results(self, cur):
        return tuple([cur[s] if shape is None else cur[s].reshape(at(self.env, shape)) for s, shape in self.outputs])

    def _library(self, cur, flat, fn, ins, out):
        ops, env = self.ops, self.env
        a = fn([ops.view(cur[s], at(env, shape), at(env, ld.strides), at(env, ld.offset)) for s, ld, shape in ins],
               env)
        cur[out] = a = a if ops.row_major(a) else ops.contiguous(a)
        flat[out] = _flat(a)

    def _run(self, arrays, timings, capture):
        ops = self.ops
        cur, flat = self._bind(arrays)
        marks = []
        for j, (kind, fn, ins, out) in enumerate(self.steps):
            if timings is not None:
                marks.append(ops.timer())
                marks[-1][0]()
            if kind == "launch":
                for ck, arg_slots in fn:
                    args = [flat[s] for s in arg_slots]
                    ck(*args, env=self.env) if self.symbolic else ck(*args)
            else:
                self._library(cur, flat, fn, ins, out)
            if timings is not None:
                marks[-1][1]()
            if capture is not None:
                capture.update({vid: ops.to_host(cur[slot]) for vid, slot in self.written[j]})
        if timings is not None:
            ops.synchronize()
            timings.extend(elapsed() / 1e3 for _, _, elapsed in marks)
        return self._results(cur)


def _flat(a):
    return a if a.ndim == 1 else a.reshape(a.size)


def wall_timer(synchronize):
    """A step timer on the wall clock, synchronizing around the step (the simulator has no events)."""
    box = [0.0]

    def start():
        synchronize()
        box[0] = time.perf_counter()

    def stop():
        synchronize()
        box[0] = (time.perf_counter() - box[0]) * 1e3
    return start, stop, lambda: box[0]


def build_device_programs(graphs, fused, inplace, ops):
    """[DeviceProgram or None] for each graph (None passes through). fused[g]: graph g's (kernels,
    aliases) from fusion; inplace[g]: its (output index, input index) pairs that may share memory
    (slots.inplace_slots decides). A kernel the GPU cannot run raises here, at compile time."""
    from .lower import compile_kernels

    def program(g, kernels, aliases, slots, in_place, label):
        launchers = {id(k): cks for k, cks in zip(kernels, compile_kernels(kernels, label)) if cks is not None}
        return DeviceProgram(g, kernels, aliases, slots, in_place, launchers, ops)
    return per_graph(program, graphs, fused, inplace)
