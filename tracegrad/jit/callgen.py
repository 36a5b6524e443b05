"""An entry's call and its backward's apply as straight-line Python, generated once per signature.

Entry.call and CompiledNode.apply decide per call what this signature decided once: where each
input comes from, which outputs need checks, what the autograd node keeps. For the common entry —
no check mode, nothing written back, every output a fresh tensor, arguments and
captured tensors (a module's parameters) as the inputs — `straight_call(entry)` writes those
decisions out as code: read the inputs' arrays,
run the forward program, wrap the results, build the node. `straight_apply(entry)` does the same
for the backward, and `straight_backward(entry)` a one-element result's whole `backward()` when every
input of the node is a leaf (the engine's work with nothing left to decide: check the saved values,
run the backward program on the implicit ones, accumulate into each leaf's .grad). An entry
outside that common case (in-place updates and .grad assignments written back, a .grad or a number
read per call, results that may alias an input) gets `straight_general_call(entry)`: Entry.call's
general steps with the entry's plan written out as constants, one line per input and per update
(`entry.general_source`); on cuda, not the general call. Check-mode entries keep the general methods
(a cuda entry's runs copy host inputs to the device: backends/cuda/run.py's device_run); the paths build
the same node and the same tensors
(tests/test_call_fast_path.py runs them side by side). The generated text is kept as
`entry.call_source`, `entry.apply_source` and `entry.backward_source`.
"""
import functools
import types
from operator import attrgetter

import numpy as np

from ..autograd import _Mode, _into_grad
from ..backends.cpu.native_call import writeable_check
from ..pytree import unflatten
from ..tensor import Tensor
from ..tensor.factories import _implicit_gradient
from .aliases import rebuild_aliases
from .node import REGENERATE, CompiledNode, RefusedBackward, raise_double_backward
from .writeback import Fresh, Seen, raise_read_only, resolve, separate


def sized_run(run, sizes):
    """Program run `run(arrays, timings=None, capture=None, sizes=None)` of a symbolic trace with the call's
    `sizes` {symbol: value} as its default: a copy of a plain function (a call passes straight in, as
    a static program's), else a partial."""
    if isinstance(run, types.FunctionType) and run.__defaults__ == (None, None, None):
        return types.FunctionType(run.__code__, run.__globals__, run.__name__, (None, None, sizes), run.__closure__)
    return functools.partial(run, sizes=sizes)


def _plain(entry):
    """Whether the entry's forward call needs none of Entry.call's general steps: every input an
    argument or a captured tensor (not a .grad or a number read per call), no cpu result of a cuda call."""
    return (not entry.check and not entry.host_outs and entry.plain_outs is not None and not entry.updated
            and not entry.aliases and all(s[0] not in ("grad", "grad_of", "dynamic") for s, _ in entry.inputs))


def straight_call(entry, joined=None, keeps_saved=True):
    """(call(leaves), source), or None when the entry needs the general Entry.call. With `joined`, the
    run of the forward joined with the gradients (jit/joined.py): its extra outputs, after the
    forward's, become the node's `ahead` (a call made with grad enabled only); without `keeps_saved`
    it writes no saved values, and the node gets the forward's input arrays and versions to
    recompute them from (CompiledNode.regenerate)."""
    if not _plain(entry):
        return None
    node = entry.run_bwd is not None
    if not node and entry.refused and entry.refused[1]:
        return None
    env = {"entry": entry, "run_fwd": joined or entry.run_fwd, "wrap": Tensor._wrap, "Mode": _Mode,
           "Node": CompiledNode, "unflatten": unflatten, "STRUCT": entry.out_struct, "REGENERATE": REGENERATE}
    lines = ["def call(leaves):"]
    args = {}                     # leaf position -> local name

    def tensor(source, real, name):
        """The expression of a graph input or backward target: an argument, or the captured tensor."""
        if source[0] == "arg":
            if source[1] not in args:
                args[source[1]] = f"s{source[1]}"
                lines.insert(1, f"    s{source[1]} = leaves[{source[1]}]")
            return args[source[1]]
        env[name] = real
        return name
    inputs = [tensor(s, r, f"C{i}") for i, (s, r) in enumerate(entry.inputs)]
    if joined:                    # the backward's constants are the joined graph's last inputs
        inputs += [tensor(("captured",), e.real, f"K{i}") for i, e in enumerate(entry.bwd_inputs or ())]
    lines.append(f"    outs = run_fwd([{', '.join(t + '._data' for t in inputs)}])")
    for j, (x, dtype, dev) in enumerate(entry.plain_outs):
        env[f"DT{j}"], env[f"DEV{j}"] = dtype, dev
        lines.append(f"    r{j} = wrap(outs[{x}], DT{j}, DEV{j})")
    if node:
        reals = [tensor(s, s[1] if s[0] == "captured" else None, f"T{j}") for j, s in enumerate(entry.bwd_targets)]
        watched = [inputs[i] for i in entry.watch[0]] + [f"r{k}" for k in entry.watch[1]]
        end = (len(entry.fwd.outputs) if keeps_saved else entry.saved_at) if joined else ""
        saved = f"outs[{entry.saved_at}:{end}]" if keeps_saved or not joined else "REGENERATE"
        lines += ["    if Mode.grad:",
                  f"        node = Node(entry, {saved}, [{''.join(r + ', ' for r in reals)}], "
                  f"[{''.join(w + ', ' for w in watched)}], [{''.join(w + '._ver[0], ' for w in watched)}], "
                  f"[{''.join(_edge(r) + ', ' for r in reals)}])"]
        if joined:
            lines.append(f"        node.ahead = outs[{end}:]")
        if joined and not keeps_saved:
            fwd_inputs = inputs[:len(entry.inputs)]
            lines.append(f"        node.regen = ([{''.join(t + '._data, ' for t in fwd_inputs)}], "
                         f"[{''.join(t + '._ver, ' for t in fwd_inputs)}], [{''.join(t + '._ver[0], ' for t in fwd_inputs)}])")
        for oi, k in enumerate(entry.diff_pos):
            lines.append(f"        r{k}._requires_grad, r{k}.grad_fn, r{k}._oi = True, node, {oi}")
    results = [f"r{j}" for j in range(len(entry.plain_outs))]
    lines.append(f"    return {results[0]}" if entry.one_out else
                 f"    return unflatten(STRUCT, [{', '.join(results)}])")
    return _exec(lines, env, "call", entry.name)


def straight_general_call(entry):
    """(call(leaves), source) of Entry.call's general steps written out for a CPU entry outside check
    mode that `straight_call` leaves out: inputs read per call (a .grad, a number attribute), in-place
    updates and .grad assignments written back, results that may alias an input (copied), results
    that are inputs or views of them. Per input and per update one line of constants: a training
    step updating hundreds of parameter tensors pays no loop over generic plans."""
    if entry.on_device or entry.check:
        return None
    env = {"entry": entry, "run_fwd": entry.run_fwd, "wrap": Tensor._wrap, "Mode": _Mode, "Node": CompiledNode,
           "unflatten": unflatten, "STRUCT": entry.out_struct, "resolve": resolve, "copyto": np.copyto,
           "separate": separate, "Seen": Seen, "Fresh": Fresh, "writeable": attrgetter("flags.writeable"), "raise_read_only": raise_read_only,
           "RefusedBackward": RefusedBackward, "rebuild_aliases": rebuild_aliases}
    lines = ["def call(leaves):"]
    args = set()

    def leaf(k):
        if k not in args:
            args.add(k)
            lines.append(f"    s{k} = leaves[{k}]")
        return f"s{k}"

    def tensor(source, real, i):
        """The expression of graph input i's tensor (writeback.resolve, written out)."""
        kind = source[0]
        if kind == "arg":
            return leaf(source[1])
        if kind == "grad":
            return f"{leaf(source[1])}._grad"
        if kind == "grad_of":
            env[f"G{i}"] = source[1]
            return f"G{i}._grad"
        if kind == "dynamic":
            env[f"D{i}"] = source
            return f"resolve(D{i}, None, leaves)"
        env[f"C{i}"] = real
        return f"C{i}"
    inputs = [tensor(s, r, i) for i, (s, r) in enumerate(entry.inputs)]
    node = entry.run_bwd is not None
    if node:                          # the tensors too: the node watches them
        lines += [f"    sources = [{''.join(t + ', ' for t in inputs)}]",
                  "    arrays = [t._data for t in sources]"]
    else:
        lines.append(f"    arrays = [{''.join(t + '._data, ' for t in inputs)}]")
    if entry.updated:
        env["UPDATED"] = entry.updated
        env["all_writeable"] = writeable_check()
        lines += [f"    updated = {_gather('arrays', entry.updated_at)}",
                  "    if not all_writeable(updated) and not all(map(writeable, updated)):",
                  "        i, name = next((i, name) for i, name in UPDATED if not writeable(arrays[i]))",
                  f"        raise_read_only(entry.name, name, {'sources' if node else 'entry.input_tensors(leaves)'}"
                  "[i])"]
    lines.append("    outs = run_fwd(arrays)")
    if entry.fwd_checks:
        lines.append("    fresh = Fresh(arrays)")
    n = entry.n_user
    for q, (t, j, bump) in enumerate(entry.mutated_fixed):     # writeback.write_back, written out
        env[f"M{q}"] = t
        lines += [f"    o = outs[{n + j}]",
                  f"    if o is not M{q}._data:",
                  f"        copyto(M{q}._data, o)",
                  f"    M{q}._ver[0] += {bump}"]
    for q, ((source, real), j, bump) in enumerate(entry.mutated_per_call):
        env[f"MS{q}"], env[f"MR{q}"] = source, real
        lines += [f"    t, o = resolve(MS{q}, MR{q}, leaves), outs[{n + j}]",
                  "    if o is not t._data:",
                  "        copyto(t._data, o)",
                  f"    t._ver[0] += {bump}"]
    made = set()
    if entry.grad_writes:
        lines.append("    seen = Seen()")
    for q, (target, how) in enumerate(entry.grad_writes):
        if target[0] == "arg":
            t = leaf(target[1])
        else:
            t = env[f"W{q}"] = target[1]
            t = f"W{q}"
        if how is None:
            lines.append(f"    {t}._grad = None")
        elif len(how) == 2:
            env[f"WS{q}"], env[f"WR{q}"] = how
            lines.append(f"    {t}._grad = resolve(WS{q}, WR{q}, leaves)")
        else:
            j, dtype, dev, ver = how
            if j not in made:
                made.add(j)
                env[f"WDT{j}"], env[f"WDEV{j}"] = dtype, dev
                arr = f"outs[{j}]" if j in entry.fwd_fresh else f"fresh(outs[{j}])"
                lines += [f"    g{j} = wrap(separate({arr}, seen), WDT{j}, WDEV{j})",
                          f"    g{j}._ver[0] = {ver}"]
            lines.append(f"    {t}._grad = g{j}")
    results = []
    for k, (kind, x, check, dtype, dev) in enumerate(entry.out_items):
        if kind == "tensor":
            env[f"DT{k}"], env[f"DEV{k}"] = dtype, dev
            lines.append(f"    r{k} = wrap({f'fresh(outs[{x}])' if check else f'outs[{x}]'}, DT{k}, DEV{k})")
        else:
            env[f"V{k}"] = x
            lines.append(f"    r{k} = V{k}")
        results.append(f"r{k}")
    lines.append(f"    results = [{''.join(r + ', ' for r in results)}]")
    if node:
        lines += ["    if Mode.grad:",
                  f"        node = Node.of_call(entry, leaves, outs[{entry.saved_at}:], sources, results)"]
        lines += [f"        r{k}._requires_grad, r{k}.grad_fn, r{k}._oi = True, node, {oi}"
                  for oi, k in enumerate(entry.diff_pos)]
    elif entry.refused and entry.refused[1]:
        message, positions = entry.refused
        env["MESSAGE"] = message
        lines += ["    if Mode.grad:",
                  f"        node = RefusedBackward(MESSAGE, [{''.join(f'r{k}, ' for k in positions)}])"]
        lines += [f"        r{k}._requires_grad, r{k}.grad_fn, r{k}._oi = True, node, {oi}"
                  for oi, k in enumerate(positions)]
    if entry.aliases:
        env["ALIASES"] = entry.aliases
        lines.append("    rebuild_aliases(ALIASES, results, leaves, Mode.grad)")
    lines.append("    return results[0]" if entry.one_out else "    return unflatten(STRUCT, results)")
    return _exec(lines, env, "call", entry.name)


def _gather(name, positions):
    """The expression of the list [name[i] for i in positions]: slices of its runs of consecutive
    positions (a training step's updated inputs are one run: one slice, not 520 subscripts)."""
    runs = []
    for i in positions:
        if runs and runs[-1][1] == i:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    return " + ".join(f"{name}[{a}:{b}]" for a, b in runs) or "[]"


def straight_apply(entry):
    """(apply(node, grads), source) for the entry's backward, or None when it needs the general
    CompiledNode.apply (check mode, a cuda call's gradient of a cpu scalar, an output that may be a cotangent passed through)."""
    if entry.run_bwd is None or entry.check or entry.host_grads or len(entry.bwd_fresh) < len(entry.bwd_targets):
        return None
    env = {"entry": entry, "run_bwd": entry.run_bwd, "wrap": Tensor._wrap, "Mode": _Mode,
           "raise_double_backward": raise_double_backward}
    n = entry.n_diff
    lines = ["def apply(node, grads):",
             "    if Mode.grad or Mode.interpreters:",
             "        raise_double_backward(entry.name)",
             f"    ({''.join(f'g{i}, ' for i in range(n))}) = grads",
             f"    arrays = [{''.join(f'g{i}._data, ' for i in range(n))}]",
             "    arrays += node.saved",
             "    arrays += node.const_arrays",
             "    outs = run_bwd(arrays)",
             "    reals = node.reals"]
    lines.append("    return [" + ", ".join(f"wrap(outs[{j}], reals[{j}]._dtype, reals[{j}]._device)"
                                          for j in range(len(entry.bwd_targets))) + "]")
    return _exec(lines, env, "apply", entry.name)


def straight_backward(entry, joinable=False):
    """(backward(node, retain_graph), source): `y.backward()` of this entry's one-element result y with
    the implicit gradient, for a call whose differentiable inputs are all leaves; it returns False
    (having done nothing) when the node's edges or state need the engine's general path. None when
    the entry has no straight apply or more than one differentiable result. `joinable`: it also
    tells the entry it ran (`entry.backed`), and hands over the node's `ahead` gradients where the
    call computed them (jit/joined.py) instead of running the backward."""
    if entry.apply_source is None or entry.n_diff != 1:
        return None
    shape, dtype, dev = entry.diff_meta[0]
    if shape != () and any(d != 1 for d in shape) or not dtype.is_floating_point:
        return None
    n, w = len(entry.bwd_targets), len(entry.watch[0]) + len(entry.watch[1])
    env = {"run_bwd": entry.run_bwd, "wrap": Tensor._wrap, "into_grad": _into_grad,
           "ONES": _implicit_gradient(shape, dtype, dev), "tuple_": tuple}
    lines = ["def backward(node, retain_graph):",
             f"    ({''.join(f'e{i}, ' for i in range(n))}) = node.edges",
             "    if node.freed or node.retained is not None" +
             "".join(f" or type(e{i}) is tuple_" for i in range(n)) + ":",
             "        return False              # the engine's path: its errors, non-leaf inputs, retain_grad"]
    if w:
        lines += ["    watched, versions = node.watched, node.versions",
                  "    if " + " or ".join(f"watched[{i}]._ver[0] != versions[{i}]" for i in range(w)) + ":",
                  "        node.check_saved()         # raises eager's error"]
    run = ["arrays = [ONES]",
           "arrays += node.saved",
           "arrays += node.const_arrays",
           "outs = run_bwd(arrays)"]
    if joinable:
        lines += ["    entry.backed = True",
                  "    outs = node.ahead",
                  "    if outs is None or retain_graph:      # (with retain_graph, a later backward takes them)"]
        lines += ["        " + line for line in run]
        lines += ["    if not retain_graph:",
                  "        node.saved, node.freed, node.ahead, node.regen = None, True, None, None"]
        env["entry"] = entry
    else:
        lines += ["    " + line for line in run]
        lines += ["    if not retain_graph:",
                  "        node.saved, node.freed = None, True"]
    for i in range(n):
        lines += [f"    if e{i} is not None:",
                  f"        g = wrap(outs[{i}], e{i}._dtype, e{i}._device)",
                  f"        if e{i}._grad is None and g._shape == e{i}._shape:",
                  f"            e{i}._grad = g               # a fresh array: the leaf's own",
                  "        else:",
                  f"            into_grad(e{i}, g, False, True)"]
    lines.append("    return True")
    return _exec(lines, env, "backward", entry.name)


def _edge(t):
    """autograd's edge to tensor expression t (None: it needs no gradient; t: a leaf; else its node)."""
    return f"(None if not {t}._requires_grad else {t} if {t}.grad_fn is None else ({t}.grad_fn, {t}._oi))"


def _exec(lines, env, name, fn_name):
    source = "\n".join(lines) + "\n"
    exec(compile(source, f"<straight {name} of {fn_name}>", "exec"), env)
    return env[name], source
