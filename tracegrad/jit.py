"""@compile: trace once per signature, optimize, derive the backward graph, run, write back.

A call looks up its *signature* (pytree structure; each tensor's shape, dtype, device,
requires_grad and whether .grad is None; the values of other arguments; the identity of modules
and optimizers). A miss traces the function into a forward graph (trace.py), derives the backward
graph by running the autograd engine under a second tracer, optimizes both (ir/passes) and builds
the executables of the chosen backend. Tensors read through closures, modules and optimizers are
guarded (shape, dtype, requires_grad, .grad identity): a change retraces.
"""
import functools
import inspect
import os
import re
import sys
import time
import warnings
from collections import Counter

import numpy as np

from . import dtypes as D
from .autograd import _edge, _Mode, is_grad_enabled, run_backward
from .ir import Graph, print_graph
from .ir.interpret import run as interpret_run
from .ir.passes import optimize
from .ir.passes.remat import rematerialize
from .nn.modules import Module
from .optim import Optimizer
from .pytree import flatten, unflatten
from .tensor import Hooks, Tensor, TraceError
from .trace import Tracer

BACKENDS = ("llvm", "interpret")
_STATIC = (int, float, bool, str, type(None), D.DType)


def compile(fn=None, *, backend=None, fuse=True, check=False):
    """Decorator: `@tg.compile` or `@tg.compile(backend="interpret", fuse=True, check=False)`."""
    if fn is None:
        return lambda f: CompiledFunction(f, backend, fuse, check)
    if not callable(fn):
        raise TypeError(f"tg.compile expects a function, got {type(fn).__name__}")
    return CompiledFunction(fn, backend, fuse, check)


def _leaf_key(x, path):
    """Signature component and a readable description of one flattened argument."""
    if isinstance(x, Tensor):
        if x._data is None:
            raise TraceError(f"argument {path} is a traced tensor of another function; pass real tensors")
        return ("T", x._shape, x._dtype.name, str(x._device), x.requires_grad, x._grad is None), \
            {"shape": x._shape, "dtype": x._dtype.name, "device": str(x._device),
             "requires_grad": x.requires_grad, "grad is None": x._grad is None}
    if isinstance(x, (Module, Optimizer)):
        return (type(x).__name__, id(x)), {"object": f"{type(x).__name__} at {id(x):#x}"}
    if isinstance(x, _STATIC):
        return ("S", type(x).__name__, x), {"value": repr(x)}
    raise TypeError(f"compiled functions take tensors, Python numbers, strings, None, tg.nn.Module, tg.optim "
                    f"optimizers and tuples/lists/dicts of them; argument {path} is a {type(x).__name__}")


class CompiledFunction:
    def __init__(self, fn, backend, fuse, check):
        backend = backend or "llvm"
        if backend not in BACKENDS:
            raise ValueError(f"unknown or unavailable backend {backend!r}; available: {', '.join(BACKENDS)}")
        self.fn, self.backend, self.fuse, self.check = fn, backend, fuse, check
        self.cache = {}
        self._fast = {}      # hot-path signature (all-tensor/number arguments) -> entry
        self._stats = {"traces": 0, "cache_hits": 0, "disk_hits": 0, "compile_seconds": 0.0, "kernels": 0,
                       "retrace_reasons": []}
        self._last_desc = None
        self._changes = Counter()
        self._warned = False
        functools.update_wrapper(self, fn)

    # ------------------------------------------------------------------ calling
    def _flatten(self, args, kwargs):
        try:
            bound = inspect.signature(self.fn).bind(*args, **kwargs)
            named = list(bound.arguments.items())
        except (TypeError, ValueError):
            named = [(f"arg{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
        leaves, paths, struct = flatten(tuple(v for _, v in named), "")
        paths = [_name_path(named, p) for p in paths]
        keys, desc = [], {}
        for x, p in zip(leaves, paths):
            k, d = _leaf_key(x, p)
            keys.append(k)
            desc.update({(p, a): v for a, v in d.items()})
        grad_mode = is_grad_enabled()      # an entry traced under no_grad has no backward graph
        desc[("grad mode", "enabled")] = grad_mode
        return leaves, paths, (struct, tuple(keys), tuple(kwargs), grad_mode), desc

    def _fast_key(self, args, kwargs):
        """The signature of a call whose arguments are tensors, numbers, modules and optimizers (the hot
        path), else None: one flat tuple (a tensor's part starts with its shape, a number's with its
        type), the device as its fields (hashing a device object runs Python code)."""
        if kwargs:
            return None
        key = [_Mode.grad]
        for x in args:
            if type(x) is Tensor and x._data is not None:
                dev = x._device
                key += (x._shape, x._dtype, dev.type, dev.index, x._requires_grad, x._grad is None)
            elif type(x) in (int, float, bool):
                key += (type(x), x)
            elif isinstance(x, (Module, Optimizer)):     # by identity, as in the full signature
                key += (Module, id(x))
            else:
                return None
        return tuple(key)

    def __call__(self, *args, **kwargs):
        if Hooks.tracer is not None:       # called while tracing another function: inline it
            return self.fn(*args, **kwargs)
        fast = self._fast_key(args, kwargs)
        entry = self._fast.get(fast) if fast is not None else None
        if entry is not None and (not entry.guards and not entry.grad_guards or entry.guard_failure() is None):
            self._stats["cache_hits"] += 1
            return entry.call(args)
        leaves, paths, key, desc = self._flatten(args, kwargs)
        entry = self.cache.get(key)
        if entry is not None:
            reason = entry.guard_failure()
            if reason is None:
                self._stats["cache_hits"] += 1
                if fast is not None:
                    self._fast[fast] = entry
                return entry.call(leaves)
            del self.cache[key]
            self._fast.clear()
            self._note_retrace([reason])
            self._last_desc = None
        entry = self._build(args, kwargs, leaves, paths, key, desc)
        if fast is not None:
            self._fast[fast] = entry
        return entry.call(leaves)

    def _note_retrace(self, reasons):
        self._stats["retrace_reasons"].extend(reasons)
        for r in reasons:
            self._changes[r.split(":")[0]] += 1

    def _build(self, args, kwargs, leaves, paths, key, desc):
        if self._last_desc is not None:
            reasons = [f"{p}: {a} {self._last_desc[(p, a)]} -> {v}" if (p, a) in self._last_desc else
                       f"{p}: new argument" for (p, a), v in desc.items() if self._last_desc.get((p, a)) != v]
            self._note_retrace(reasons)
        self._last_desc = desc
        t0 = time.perf_counter()
        entry = Entry(self, args, kwargs, leaves, paths)
        self._stats["traces"] += 1
        self._stats["compile_seconds"] += time.perf_counter() - t0
        self._stats["kernels"] = entry.kernel_count()
        self._stats["disk_hits"] += int(entry.disk_hit)
        self.cache[key] = entry
        if self._stats["traces"] > 8 and not self._warned:
            self._warned = True
            what = ", ".join(f"{k} ({n}×)" for k, n in self._changes.most_common(3))
            warnings.warn(f"{self.__name__} was traced {self._stats['traces']} times; what keeps changing: {what}. "
                          f"Keep shapes, dtypes and non-tensor arguments fixed, or pass changing numbers "
                          f"as tensors.", RuntimeWarning, stacklevel=3)
        _dump(entry)
        return entry

    def _entry_for(self, args, kwargs):
        leaves, paths, key, desc = self._flatten(args, kwargs)
        entry = self.cache.get(key)
        if entry is None or entry.guard_failure() is not None:
            self._fast.clear()
            entry = self._build(args, kwargs, leaves, paths, key, desc)
        return entry

    # ------------------------------------------------------------------ introspection
    def ir(self, *args, stage="forward", source=False, optimized=False, **kwargs):
        """The IR text of a stage: traced, forward, backward, kernels, llvm (see SPEC §5)."""
        entry = self._entry_for(args, kwargs)
        return entry.stage_text(stage, source, optimized)

    def profile(self, *args, repeat=5, **kwargs):
        """Per kernel of the forward program, a dict: "kernel", "kind", "ops", "time" (median seconds
        over `repeat` runs), "bytes" moved and achieved "GB/s" (the memory-bandwidth roofline).
        Needs backend="llvm"."""
        entry = self._entry_for(args, kwargs)
        if entry.programs is None:
            raise ValueError(f"profile() needs backend='llvm'; {self.__name__} uses {self.backend!r}")
        leaves = self._flatten(args, kwargs)[0]
        arrays = [entry._resolve(s, r, leaves)._data for s, r in entry.inputs]
        prog = entry.programs[0]
        runs = []
        for _ in range(repeat):
            t = []
            prog.run(arrays, timings=t)
            runs.append(t)
        rows = []
        for j, k in enumerate(prog.kernels):
            sec = float(np.median([r[j] for r in runs]))
            moved = k.bytes_moved()
            rows.append({"kernel": f"k{j}", "kind": k.kind, "ops": k.ops(), "time": sec, "bytes": moved,
                         "GB/s": moved / sec / 1e9 if sec > 0 else float("inf")})
        return rows

    def to_dot(self, *args, **kwargs):
        return to_dot(self._entry_for(args, kwargs).fwd)

    def stats(self):
        return dict(self._stats, retrace_reasons=list(self._stats["retrace_reasons"]))


def _name_path(named, p):
    """'_0_1' -> 'x_1' (the argument's name, then the positions inside it)."""
    parts = p.split("_")[1:]
    if not parts:
        return "arg"
    base = named[int(parts[0])][0]
    return "_".join([base] + parts[1:])


# ---------------------------------------------------------------------- one compiled signature

class Entry:
    """Graphs and executables for one signature, and the plan for inputs, outputs and write-backs."""

    def __init__(self, cf, args, kwargs, leaves, paths):
        self.cf, self.name = cf, re.sub(r"[^\w.]", "", cf.__name__) or "f"   # <lambda> -> lambda
        self.n_leaves = len(leaves)
        self._trace(args, kwargs, leaves, paths)
        self.fwd = optimize(self.traced.copy())
        self.bwd = optimize(self.bwd_traced) if self.bwd_traced is not None else None
        if self.bwd is not None:
            fwd, bwd = rematerialize(self.fwd, self.bwd, self.saved_at, len(self.diff_outputs))
            if bwd is not self.bwd:
                self.fwd, self.bwd = optimize(fwd), optimize(bwd)
        self.llvm_text, self.disk_hit = None, False
        if cf.backend == "llvm":
            from .codegen import build_programs
            progs, self.llvm_text, engine = build_programs([self.fwd, self.bwd], cf.fuse, [self.inplace, ()])
            self.programs, self.disk_hit = progs, engine.disk_hit
            self.run_fwd = progs[0].run
            self.run_bwd = progs[1].run if progs[1] is not None else None
        else:
            self.programs = None
            self.run_fwd = _executable(self.fwd, cf.backend)
            self.run_bwd = _executable(self.bwd, cf.backend) if self.bwd is not None else None
        self._plan_calls()

    def _plan_calls(self):
        """What each call does, decided once: where inputs come from, which outputs need the aliasing
        check (those a program does not allocate itself), what the autograd node needs."""
        self.arg_inputs = [s[1] for s, _ in self.inputs] if all(s[0] == "arg" for s, _ in self.inputs) else None
        fwd_fresh = self.programs[0].fresh_outputs if self.programs is not None else frozenset()
        self.out_items = [(kind, x, x not in fwd_fresh, st._dtype, st._device) if kind == "tensor" else
                          (kind, x, False, None, None) for kind, x, st in self.out_plan]
        self.fwd_checks = bool(self.grad_writes) or any(check for _, _, check, _, _ in self.out_items)
        if self.run_bwd is None:
            return
        tensor_pos = [k for k, (kind, _, _) in enumerate(self.out_plan) if kind == "tensor"]
        self.diff_pos = [tensor_pos[i] for i in self.diff_outputs]
        self.diff_meta = [(st._shape, st._dtype, st._device) for st in
                          (self.out_plan[k][2] for k in self.diff_pos)]
        self.bwd_fresh = self.programs[1].fresh_outputs if self.programs is not None else frozenset()
        self.bwd_arg_targets = [s[1] for s in self.bwd_targets] if all(s[0] == "arg" for s in self.bwd_targets) \
            else None

    def _trace(self, args, kwargs, leaves, paths):
        graph = Graph(self.name)
        names = {}
        tracer = Tracer(graph, names=names)
        new_leaves = list(leaves)
        for k, (x, p) in enumerate(zip(leaves, paths)):
            if isinstance(x, Tensor):
                st = tracer.lift(x, ("arg", k), name=p)
                new_leaves[k] = st
                tracer.arg_grads[id(st)] = (k, x, p)
            else:
                _name_tensors_of(x, p, names)
        for _, n, _, obj in _free_objects(self.cf.fn):     # captured modules, optimizers, tensors
            _name_tensors_of(obj, n, names)
        _, _, struct = flatten(tuple(a for a in _positional(args, kwargs)), "")
        call_args, call_kwargs = _rebuild_call(args, kwargs, new_leaves, struct)
        prev, Hooks.tracer = Hooks.tracer, tracer
        try:
            out = self.cf.fn(*call_args, **call_kwargs)
        except Exception as e:
            _annotate(e, self.name)
            raise
        finally:
            Hooks.tracer = prev
            changes = tracer.grad_changes()
        self.tracer = tracer
        # outputs
        out_leaves, _, self.out_struct = flatten(out, "out")
        self.out_plan, values = [], []
        for x in out_leaves:
            if isinstance(x, Tensor):
                st = tracer.lift(x)
                self.out_plan.append(("tensor", len(values), st))
                values.append(st._ir)
            elif isinstance(x, _STATIC):
                self.out_plan.append(("static", x, None))
            else:
                raise TypeError(f"compiled function {self.name} returned a {type(x).__name__}; return tensors, "
                                f"Python numbers, None, or tuples/lists/dicts of them")
        self.n_user = len(values)
        # in-place updates of real tensors, then .grad assignments
        self.mutations, self.inplace = [], []      # inplace: (output index, input index) candidates
        for i, e in enumerate(tracer.order):
            if e.standin._ir is not e.value and e.source[0] != "const":
                self.mutations.append((e.source, e.real))
                self.inplace.append((len(values), i))
                values.append(e.standin._ir)
        _refuse_aliased_updates(tracer, self.name)
        self.grad_writes = []
        standins = {id(e.standin): e for e in tracer.order}
        for t, before, after in changes:
            e = standins.get(id(t))
            target = ("arg", e.source[1]) if e is not None else ("captured", t)
            if after is None:
                self.grad_writes.append((target, None))
            else:
                self.grad_writes.append((target, len(values)))
                values.append(tracer.lift(after)._ir)
        self.inputs = [(e.source, e.real) for e in tracer.order]
        self.guards = [(e.real, e.real._shape, e.real._dtype, e.real.requires_grad) for e in tracer.order
                       if e.source[0] == "captured"]
        self.grad_guards = [(t, before) for t, before in tracer.grads.values() if t._data is not None]
        self.binding_guards = _captured_bindings(self.cf.fn, tracer)
        # reverse mode: the backward graph of the outputs that need gradients
        self.bwd_traced, self.saved_at = None, len(values)
        if not tracer.ran_backward and is_grad_enabled():
            self._trace_backward(tracer, values)
        graph.outputs = values
        self.traced = graph

    def _trace_backward(self, tracer, values):
        diff = [(i, st) for kind, i, st in self.out_plan if kind == "tensor" and st.requires_grad
                and st._dtype.is_floating_point]
        targets = [e for e in tracer.order if e.standin.requires_grad and e.source[0] in ("arg", "captured")]
        if not diff or not targets:
            return
        bgraph = Graph(self.name + "_backward")
        btr = Tracer(bgraph, parent=tracer)
        cots = [Tensor._symbolic(st._shape, st._dtype, st._device, bgraph.add_input(f"g{j}", st._shape, st._dtype))
                for j, (_, st) in enumerate(diff)]
        prev, Hooks.tracer = Hooks.tracer, btr
        try:
            grads = run_backward([st for _, st in diff], cots, False, False,
                                 inputs=[e.standin for e in targets], allow_unused=True)
            outs = []
            for e, g in zip(targets, grads):
                g = g if g is not None else btr.constant(0.0, e.standin._dtype, e.standin._device,
                                                         e.standin._shape)
                outs.append(btr.lift(g)._ir)
        finally:
            Hooks.tracer = prev
        bgraph.outputs = outs
        # inputs in the order the compiled node passes them: cotangents, saved values, constants
        bgraph.inputs = ([c._ir for c in cots] + [btr._saved[id(v)]._ir for v in btr.saved]
                         + [e.value for e in btr.order])
        self.bwd_traced = bgraph
        self.diff_outputs = [i for i, _ in diff]
        self.bwd_targets = [e.source if e.source[0] == "arg" else ("captured", e.real) for e in targets]
        self.bwd_inputs = [e for e in btr.order]     # tensors the backward reads directly (constants)
        values.extend(btr.saved)

    # ------------------------------------------------------------------ guards and calls
    def guard_failure(self):
        for kind, name, holder, obj in self.binding_guards:
            now = holder.get(name) if kind == "global" else _cell_value(holder)
            if now is not obj:
                return f"{kind} {name}: rebound to another object"
        for t, shape, dtype, rg in self.guards:
            if t._shape != shape or t._dtype is not dtype or t.requires_grad != rg:
                return f"captured tensor {self._name_of(t)}: {dtype.name}{list(shape)} requires_grad={rg} -> " \
                       f"{t._dtype.name}{list(t._shape)} requires_grad={t.requires_grad}"
        for t, before in self.grad_guards:
            if t._grad is not before:
                return f"{self._name_of(t)}.grad: {'None' if before is None else 'a tensor'} -> " \
                       f"{'None' if t._grad is None else 'another tensor'}"
        return None

    def _name_of(self, t):
        for e in self.tracer.order:
            if e.real is t:
                return e.value.name
        return "a captured tensor"

    def _resolve(self, source, real, leaves):
        kind = source[0]
        if kind == "arg":
            return leaves[source[1]]
        if kind == "grad":
            return leaves[source[1]]._grad
        return real

    def call(self, leaves):
        if self.arg_inputs is not None:
            sources = [leaves[k] for k in self.arg_inputs]
        else:
            sources = [self._resolve(s, r, leaves) for s, r in self.inputs]
        arrays = [t._data for t in sources]
        if self.cf.check:
            outs = _checked_run(self, 0, self.fwd, arrays)
        else:
            outs = self.run_fwd(arrays)
        fresh = _Fresh(arrays) if self.fwd_checks else None
        if self.mutations:
            for (source, real), arr in zip(self.mutations, outs[self.n_user:]):
                t = self._resolve(source, real, leaves)
                if arr is not t._data:          # unless the kernel already wrote in place
                    np.copyto(t._data, arr)
                t._ver[0] += 1
        for (target, j) in self.grad_writes:
            t = leaves[target[1]] if target[0] == "arg" else target[1]
            if j is None:
                t._grad = None
            elif t._grad is not None and t._grad._data is not None and t._grad._data.flags.writeable:
                np.copyto(t._grad._data, outs[j])
                t._grad._ver[0] += 1
            else:
                t._grad = Tensor._wrap(fresh(outs[j]), t._dtype, t._device)
        results = [(Tensor._wrap(fresh(outs[x]) if check else outs[x], dtype, dev) if kind == "tensor" else x)
                   for kind, x, check, dtype, dev in self.out_items]
        if self.run_bwd is not None and _Mode.grad:
            node = CompiledNode(self, leaves, outs[self.saved_at:], sources)
            for oi, k in enumerate(self.diff_pos):
                t = results[k]
                t._requires_grad, t.grad_fn, t._oi = True, node, oi
        return unflatten(self.out_struct, results)

    def kernel_count(self):
        if self.programs is not None:
            return sum(len(p.kernels) for p in self.programs if p is not None)
        return len(self.fwd.nodes) + (len(self.bwd.nodes) if self.bwd is not None else 0)

    def stage_text(self, stage, source=False, optimized=False):
        if stage == "traced":
            return print_graph(self.traced, source=source)
        if stage == "forward":
            return print_graph(self.fwd, source=source)
        if stage == "backward":
            if self.bwd is None:
                raise ValueError(f"{self.name} has no backward graph for these arguments: no output needs a "
                                 f"gradient (pass tensors with requires_grad=True)")
            return print_graph(self.bwd, source=source)
        if stage == "kernels":
            return kernels_text(self)
        if stage == "llvm":
            if self.llvm_text is None:
                raise ValueError(f"stage 'llvm' needs backend='llvm'; {self.name} uses {self.cf.backend!r}")
            if optimized:
                from .codegen.engine import optimize
                return str(optimize(self.llvm_text))
            return self.llvm_text
        raise ValueError(f"unknown stage {stage!r}; expected one of traced, forward, backward, kernels, llvm")


class _Fresh:
    """Copy arrays that alias an input, so results never share memory with arguments."""

    def __init__(self, inputs):
        self.inputs = inputs

    def __call__(self, arr):
        for a in self.inputs:
            if arr is a or np.may_share_memory(arr, a):
                return np.array(arr)
        return arr if arr.flags.writeable else np.array(arr)


class CompiledNode:
    """The autograd node of a compiled call: its backward runs the compiled backward graph."""

    owned_grads = True     # each gradient it returns is a fresh array, safe to store as .grad

    def __init__(self, entry, leaves, saved, inputs):
        self.entry, self.saved, self.freed = entry, saved, False
        self.out_meta, self.n_out = entry.diff_meta, len(entry.diff_meta)
        idx = entry.bwd_arg_targets
        self.reals = [leaves[k] for k in idx] if idx is not None else \
            [leaves[s[1]] if s[0] == "arg" else s[1] for s in entry.bwd_targets]
        self.watched = inputs          # the backward may read any forward input: watch their versions
        self.versions = [t._ver[0] for t in inputs]
        self.edges = [_edge(t) for t in self.reals]
        self.const_arrays = [e.real._data for e in entry.bwd_inputs] if entry.bwd_inputs else ()

    def name(self):
        return f"Compiled{''.join(w.capitalize() for w in self.entry.name.split('_'))}Backward"

    def __repr__(self):
        return f"<{self.name()}>"

    def check_saved(self):
        if self.freed:
            raise RuntimeError("Trying to backward through the graph of a compiled call a second time; specify "
                               "retain_graph=True on the first backward if you need to.")
        for t, v in zip(self.watched, self.versions):
            if t._ver[0] != v:
                raise RuntimeError(f"one of the variables needed for gradient computation has been modified by an "
                                   f"inplace operation: [{t.dtype} {list(t.shape)}], an input of compiled "
                                   f"{self.entry.name}, is at version {t._ver[0]}; expected version {v} instead.")

    def apply(self, grads):
        if _Mode.grad:
            raise RuntimeError(f"create_graph=True (double backward) through compiled function {self.entry.name} "
                               f"is not supported; call the function without tg.compile for higher-order grads")
        entry = self.entry
        arrays = [g._data for g in grads]
        arrays += self.saved
        arrays += self.const_arrays
        if entry.cf.check:
            outs = _checked_run(entry, 1, entry.bwd, arrays)
        else:
            outs = entry.run_bwd(arrays)
        known = entry.bwd_fresh         # other outputs are checked: a cotangent passed through is copied
        fresh = _Fresh(arrays) if len(known) < len(outs) else None
        return [Tensor._wrap(o if j in known else fresh(o), t._dtype, t._device)
                for j, (o, t) in enumerate(zip(outs, self.reals))]

    def release(self):
        self.saved, self.freed = None, True


def _refuse_aliased_updates(tracer, name):
    """The graph treats every input as its own value, so an in-place update of a tensor that another
    input views (a parameter and a slice of it, both read) would be missed: refuse it clearly."""
    lifted = [e for e in tracer.order if e.source[0] != "const"]
    for e in lifted:
        if e.standin._ir is e.value:
            continue
        for o in lifted:
            if o is not e and np.may_share_memory(e.real._data, o.real._data):
                raise TraceError(f"compiled function {name} updates {e.value.name} in place while it also reads "
                                 f"{o.value.name}, which shares its memory (a view of it or its base); compute the "
                                 f"view inside the function from the updated tensor instead")


def _free_objects(fn):
    """(kind, name, holder, object) for the globals and closure variables that `fn`'s code (nested
    code included) reads."""
    import types
    if not isinstance(fn, types.FunctionType):
        return []
    codes, names = [fn.__code__], set()
    while codes:
        c = codes.pop()
        names.update(c.co_names)
        codes.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    out = [("global", n, fn.__globals__, fn.__globals__[n]) for n in sorted(names) if n in fn.__globals__]
    for n, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        out.append(("closure variable", n, cell, _cell_value(cell)))
    return out


def _captured_bindings(fn, tracer):
    """Globals and closure variables of `fn` that held a tensor the trace lifted: rebinding one to
    another object must retrace, as eager code would read the new one."""
    return [b for b in _free_objects(fn) if isinstance(b[3], Tensor) and id(b[3]) in tracer.lifted]


def _name_tensors_of(obj, prefix, names):
    """Readable graph-input names for the tensors a module, optimizer or tensor holds."""
    if isinstance(obj, Tensor):
        names.setdefault(id(obj), prefix)
    elif isinstance(obj, Module):
        for n, prm in obj.named_parameters():
            names.setdefault(id(prm), f"{prefix}.{n}")
            if prm._grad is not None:
                names.setdefault(id(prm._grad), f"{prefix}.{n}.grad")
    elif isinstance(obj, Optimizer):
        for i, prm in enumerate(obj.params):
            names.setdefault(id(prm), f"{prefix}.param{i}")
            for key, val in obj.state.get(id(prm), {}).items():
                if isinstance(val, Tensor):
                    names.setdefault(id(val), f"{prefix}.param{i}.{key}")


def _cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:       # an empty cell
        return None


def _executable(graph, backend):
    """The callable running `graph` on a list of arrays with the chosen backend."""
    if backend == "interpret":
        return lambda arrays: interpret_run(graph, *arrays)
    raise ValueError(f"backend {backend!r} is not available")


def _checked_run(entry, which, graph, arrays):
    """check=True: run the program and the interpret backend side by side; raise CheckError naming
    the first kernel whose output differs, with the ops fused into it."""
    from .errors import CheckError
    from .ir.interpret import values
    ref = values(graph, *arrays)
    prog = entry.programs[which] if entry.programs is not None else None
    if prog is None:
        return tuple(ref[id(v)] for v in graph.outputs)
    got = {}
    outs = prog.run(arrays, capture=got)
    for j, k in enumerate(prog.kernels):
        for v in k.outputs:
            a, b = got[id(v)], ref[id(v)]
            if a.shape != b.shape or not _close(a, b):
                diff = np.max(np.abs(a.astype(np.float64) - b)) if a.shape == b.shape and a.size else "shape"
                raise CheckError(f"{graph.name}: kernel k{j} [{k.kind}] output {v.type} differs from the interpret "
                                 f"backend (max abs diff {diff}); ops fused into it: {', '.join(k.ops()) or 'copy'}")
    return outs


def _close(a, b):
    if a.dtype.kind == "f":
        tol = 1e-3 if a.dtype == np.float32 else 1e-9
        return np.allclose(a, b, rtol=tol, atol=tol, equal_nan=True)
    return np.array_equal(a, b)


def _positional(args, kwargs):
    return list(args) + list(kwargs.values())


def _rebuild_call(args, kwargs, new_leaves, struct):
    rebuilt = unflatten(struct, new_leaves)
    n = len(args)
    return list(rebuilt[:n]), dict(zip(kwargs, rebuilt[n:]))


def _annotate(e, name):
    """Make an error raised while tracing name the user's line, not tracegrad's internals."""
    if isinstance(e, TraceError) or not e.args or not isinstance(e.args[0], str):
        return
    tb, where = e.__traceback__, None
    pkg = os.path.dirname(os.path.abspath(__file__))
    while tb is not None:
        fname = tb.tb_frame.f_code.co_filename
        if not os.path.abspath(fname).startswith(pkg):
            where = f"{fname}:{tb.tb_lineno}"
        tb = tb.tb_next
    if where and where not in e.args[0]:
        e.args = (f"{e.args[0]} (while tracing {name}, at {where})",) + e.args[1:]


def kernels_text(entry):
    """The fusion groups of the forward and backward graphs: ops, spaces and bytes moved."""
    from .ir.passes.fusion import fuse, kernels_text as text
    return "\n".join(text(f"{g.name} ({label})", fuse(g, entry.cf.fuse)[0]) for label, g in
                     (("forward", entry.fwd), ("backward", entry.bwd)) if g is not None)


def to_dot(graph):
    """Graphviz DOT text of a graph; edges labelled with value types."""
    from .ir.printer import names
    nm = names(graph)
    lines = [f'digraph "{graph.name}" {{', "  rankdir=TB;"]
    for v in graph.inputs:
        lines.append(f'  "v{id(v)}" [shape=box, label="%{nm[id(v)]}: {v.type}"];')
    for n in graph.nodes:
        lines.append(f'  "v{id(n.out)}" [label="%{nm[id(n.out)]} = {n.op}\\n{n.out.type}"];')
        for i in n.inputs:
            lines.append(f'  "v{id(i)}" -> "v{id(n.out)}" [label="{i.type}"];')
    for k, v in enumerate(graph.outputs):
        lines.append(f'  "out{k}" [shape=doublecircle, label="out {k}"];')
        lines.append(f'  "v{id(v)}" -> "out{k}";')
    lines.append("}")
    return "\n".join(lines)


def make_ir(f):
    """`tg.make_ir(f)(*args)`: the forward IR text of f for these arguments, without compiling."""
    def build(*args, **kwargs):
        fn = f.fn if isinstance(f, CompiledFunction) else f
        return CompiledFunction(fn, "interpret", True, False).ir(*args, stage="forward", **kwargs)
    return build


def _dump(entry):
    want = os.environ.get("TRACEGRAD_DUMP", "")
    if not want:
        return
    out_dir = os.environ.get("TRACEGRAD_DUMP_DIR")
    for stage in [s.strip() for s in want.split(",") if s.strip()]:
        if stage == "backward" and entry.bwd is None:
            continue
        try:
            text = entry.stage_text(stage)
        except ValueError as e:
            text = f"# {e}"
        if out_dir:
            os.makedirs(out_dir, exist_ok=True)
            n = entry.cf._stats["traces"]
            with open(os.path.join(out_dir, f"{entry.name}.{n}.{stage}.txt"), "w") as fh:
                fh.write(text + "\n")
        else:
            print(f"# ---- {entry.name}: {stage}\n{text}", file=sys.stderr)
