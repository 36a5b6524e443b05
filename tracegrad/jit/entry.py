"""One compiled signature: its graphs and executables, and the plan of a call (where inputs come
from, which outputs need the aliasing check, what the autograd node needs)."""
import re
from operator import attrgetter

import numpy as np

from ..autograd import _Mode
from ..ir.graph import bind_sizes
from ..pytree import unflatten
from ..symint import LateGuard, substitute, using
from ..tensor import Tensor
from .aliases import rebuild_aliases
from .callgen import sized_run, straight_apply, straight_backward, straight_call, straight_general_call
from .check import checked_run
from ..backends.cuda.run import DeviceFresh, DeviceInputs, expanded, to_host
from .index_checks import checking
from .joined import choosing_call, joinable
from .node import CompiledNode, RefusedBackward, watch_plan
from .pipeline import compile_call, finish, partial_backward
from .writeback import CALLERS, Fresh, raise_read_only, resolve, write_back


_data_of = attrgetter("_data")
_writeable = attrgetter("flags.writeable")
_wrap = Tensor._wrap            # bound once (a classmethod binds at every attribute read)


def entry_name(cf):
    """The compiled function's name as graphs take it (<lambda> -> lambda)."""
    return re.sub(r"[^\w.]", "", cf.__name__) or "f"


class Entry:
    def __init__(self, cf, args, kwargs, leaves, paths, stages=None):
        """stages: the traced stages to finish (a symbolic trace instantiated for one call's sizes:
        dynamic.py), else fn is traced here."""
        self.cf, self.check = cf, cf.check
        self.name = entry_name(cf)
        self.n_leaves = len(leaves)
        s = compile_call(cf.fn, self.name, cf.backend, cf.fuse, args, kwargs, leaves, paths, cf.runs) \
            if stages is None else stages if stages.finished else finish(stages, cf.fuse)
        self.sizes, self.shape_env, self.shared = s.sizes, s.shape_env, s.shared
        cap = s.capture
        self.traced, self.fwd, self.bwd, self.saved_at = s.traced, s.fwd, s.bwd, s.saved_at
        self.programs, self.llvm_text, self.disk_hit = s.programs, s.llvm_text, s.disk_hit
        self.run_fwd, self.run_bwd = s.run_fwd, s.run_bwd
        self.backend, self.device = s.backend, s.device
        self.on_device = s.device.type == "cuda"
        if not self.on_device and self.run_fwd is not None:     # indices of the inputs' values, at each call
            self.run_fwd = checking(self.run_fwd, s.traced, s.sizes)
        # the forward's and the backward's host inputs kept on the device
        self.device_inputs = DeviceInputs() if self.on_device else None
        self.device_bwd_inputs = DeviceInputs() if self.on_device else None
        self.guards = cap.guards
        self.guard_failure = cap.guards.failure  # None when every guard holds, else the first reason
        self.guarded = bool(cap.guards)          # whether a call must check them
        self.inputs, self.out_plan, self.out_struct, self.n_user = cap.inputs, cap.out_plan, cap.out_struct, cap.n_user
        self.mutations, self.grad_writes = cap.mutations, cap.grad_writes
        # the updated tensors, (tensor, j) where fixed, ((source, real), j) where read per call; j: the
        # update's position among the outputs after the user's
        muts = [(m, j, cap.bumps[j]) for j, m in enumerate(self.mutations)]
        self.mutated_fixed = [(m[1], j, k) for m, j, k in muts if m[0][0] == "captured"]
        self.mutated_per_call = [(m, j, k) for m, j, k in muts if m[0][0] != "captured"]
        self.aliases = [(k, kind, where, [(p, {n: bind_sizes(v, self.sizes) for n, v in a.items()})
                                          for p, a in ops], how)
                        for k, kind, where, ops, how in cap.aliases] if self.sizes else cap.aliases
        self.updates = cap.updates
        self.updated = [(ii, self.guards.input_names[ii]) for _, ii in cap.updates]
        self.updated_at = [ii for ii, _ in self.updated]
        self.writes = bool(self.mutations or self.grad_writes)
        # a cuda call's results and .grad values that are cpu tensors (of 0-d cpu inputs): host copies
        self.host_outs = [x for kind, x, st in self.out_plan if kind == "tensor" and st._device.type == "cpu"] + \
            [how[0] for _, how in self.grad_writes if how and len(how) == 4 and how[2].type == "cpu"] \
            if self.on_device else []
        self._kernels = None
        self._partial = {}          # the backward for some cotangents only, by which (partial_backward)
        # no backward graph, yet outputs that require grad: they get a node passing nothing on, or
        # raising eager's error at backward() (s.refused: that message, or False)
        needs_grad = [k for k, (kind, _, st) in enumerate(self.out_plan)
                      if kind == "tensor" and st.requires_grad and st._dtype.is_floating_point]
        self.refused = s.refused is not None and (s.refused, needs_grad)
        self._plan_calls(s.backward)
        self.apply = CompiledNode.apply_general       # the backward's apply(node, grads)
        self.call_source = self.general_source = self.apply_source = self.backward_source = None
        self.backward = None                           # straight_backward's: CompiledNode.ones_backward
        fast = straight_call(self)
        if fast is not None:                           # the same steps, written out for this signature
            self.call, self.call_source = fast
        else:
            fast = straight_general_call(self)
            if fast is not None:
                self.call, self.general_source = fast
        fast = straight_apply(self)
        if fast is not None:
            self.apply, self.apply_source = fast
        fast = straight_backward(self)
        if fast is not None:
            self.backward, self.backward_source = fast
            if joinable(self):                         # calls may compute the gradient with the forward
                self.backward, self.backward_source = straight_backward(self, joinable=True)
                self.call = choosing_call(self, self.call)

    def _plan_calls(self, backward):
        self.arg_inputs = [s[1] for s, _ in self.inputs] if all(s[0] == "arg" for s, _ in self.inputs) else None
        # inputs resolved per call (arguments, their .grad, number attributes); the others are the
        # captured tensors themselves (resolve returns them; the guards check they are still held)
        per_call = (*CALLERS, "dynamic")
        self.fixed_inputs = [None if s[0] in per_call else r for s, r in self.inputs]
        self.varying_inputs = [(i, (s, r)) for i, (s, r) in enumerate(self.inputs) if s[0] in per_call]
        self.fwd_fresh = fwd_fresh = self.programs[0].fresh_outputs if self.programs is not None else frozenset()
        self.out_items = [(kind, x, x not in fwd_fresh, st._dtype, st._device) if kind == "tensor" else
                          (kind, x, False, None, None) for kind, x, st in self.out_plan]
        self.fwd_checks = bool(self.grad_writes) or any(check for _, _, check, _, _ in self.out_items)
        # the common case, wrapped without per-item decisions: nothing written back, every output a
        # tensor needing no copy
        self.plain_outs = [(x, dtype, dev) for _, x, _, dtype, dev in self.out_items] \
            if not (self.writes or self.fwd_checks) and all(kind == "tensor" for kind, *_ in self.out_items) else None
        self.one_out = self.out_struct[0] == "leaf"
        if self.run_bwd is None:
            return
        self.diff_outputs = backward.diff_outputs
        inputs, outputs = watch_plan(self.traced, self.fwd, self.saved_at, self.n_user, self.updates)
        self.watch = inputs, [k for k, (kind, x, _) in enumerate(self.out_plan) if kind == "tensor" and x in outputs]
        self.bwd_targets = [e.source if e.source[0] == "arg" else ("captured", e.real) for e in backward.targets]
        self.bwd_inputs = backward.reads       # tensors the backward reads directly (constants)
        self.host_grads = [j for j, e in enumerate(backward.targets) if e.real._device.type == "cpu"] \
            if self.on_device else []           # gradients of 0-d cpu inputs of a cuda call: to the host
        tensor_pos = [k for k, (kind, _, _) in enumerate(self.out_plan) if kind == "tensor"]
        self.diff_pos = [tensor_pos[i] for i in self.diff_outputs]
        self.diff_meta = [(substitute(st._shape, self.sizes), st._dtype, st._device) for st in
                          (self.out_plan[k][2] for k in self.diff_pos)]
        self.n_diff = len(self.diff_meta)
        self.bwd_fresh = self.programs[1].fresh_outputs if self.programs is not None else frozenset()
        self.bwd_arg_targets = [s[1] for s in self.bwd_targets] if all(s[0] == "arg" for s in self.bwd_targets) \
            else None

    def input_tensors(self, leaves):
        """The caller's tensors feeding the forward graph's inputs, in order."""
        if self.arg_inputs is not None:
            return [leaves[k] for k in self.arg_inputs]
        out = self.fixed_inputs.copy()
        for i, (s, r) in self.varying_inputs:
            out[i] = resolve(s, r, leaves)
        return out

    def call(self, leaves):
        # map over C getters, not list comprehensions: each of those is a function object and a frame
        sources = list(map(leaves.__getitem__, self.arg_inputs)) if self.arg_inputs is not None else \
            self.input_tensors(leaves)
        arrays = list(map(_data_of, sources))
        if self.on_device:
            arrays = self.device_inputs(arrays)
        if self.updated and not (all(map(_writeable, map(arrays.__getitem__, self.updated_at))) if not self.on_device
                                 else all(writable(arrays[i]) for i in self.updated_at)):
            i, name = next((i, name) for i, name in self.updated if not writable(arrays[i]))
            raise_read_only(self.name, name, sources[i])
        if self.check and (self.programs is not None or not self.on_device):
            outs = checked_run(self.programs, 0, self.fwd, arrays, self.sizes)
        else:
            outs = self.run_fwd(arrays)
        if self.host_outs:
            outs = to_host(outs, self.host_outs)
        if self.plain_outs is not None:
            results = []
            for x, dtype, dev in self.plain_outs:
                results.append(_wrap(outs[x], dtype, dev))
        else:
            fresh = (DeviceFresh if self.on_device else Fresh)(arrays) if self.fwd_checks else None
            if self.writes:
                write_back(self, outs, leaves, fresh)
            results = [(Tensor._wrap(fresh(outs[x]) if check else outs[x], dtype, dev) if kind == "tensor" else x)
                       for kind, x, check, dtype, dev in self.out_items]
        if self.run_bwd is not None and _Mode.grad:
            node = CompiledNode.of_call(self, leaves, outs[self.saved_at:], sources, results)
            for oi, k in enumerate(self.diff_pos):
                t = results[k]
                t._requires_grad, t.grad_fn, t._oi = True, node, oi
        elif self.refused and self.refused[1] and _Mode.grad:
            message, positions = self.refused
            node = RefusedBackward(message, [results[k] for k in positions])
            for oi, k in enumerate(positions):
                t = results[k]
                t._requires_grad, t.grad_fn, t._oi = True, node, oi
        if self.aliases:            # results that are inputs, or views of inputs or of each other
            rebuild_aliases(self.aliases, results, leaves, _Mode.grad)
        return results[0] if self.one_out else unflatten(self.out_struct, results)

    def partial_backward(self, present):
        """(programs, graph, run, absent) of the backward for the cotangents `present[i]` True only,
        built on first use (pipeline.partial_backward; a race builds it twice, harmlessly). A symbolic
        trace's entries share one for every size, unless building it would decide on a symbolic size
        (LateGuard: the trace's size would decide for all): each entry then builds its own, for its sizes."""
        got = self._partial.get(present)
        if got is None:
            cache = self._partial if self.shared is None else self.shared.setdefault("partial", {})
            got = cache.get(present)
            if got is None:
                with using(self.shape_env):
                    try:
                        got = partial_backward(self.bwd, present, self.backend, self.device, self.cf.fuse)
                    except LateGuard:
                        got = False
                cache[present] = got
            if got is False:
                bwd = self.bwd.substitute(self.sizes)
                bwd.grads_of = self.bwd.grads_of
                got = partial_backward(bwd, present, self.backend, self.device, self.cf.fuse)
            elif self.shared is not None:     # a symbolic trace's program: this entry's sizes at each call
                programs, graph, run, absent = got
                got = programs, graph, sized_run(run, self.sizes), absent
            self._partial[present] = got
        return got

    def kernel_count(self):
        if self.programs is not None:
            return sum(len(p.kernels) for p in self.programs if p is not None)
        return len(self.fwd.nodes) + (len(self.bwd.nodes) if self.bwd is not None else 0)


def writable(a):
    return a.flags.writeable if isinstance(a, np.ndarray) else not expanded(a)
