"""Random programs of five kinds, each a small Python module whose `run(mode, dtype)` calls the
program eagerly (mode "eager") or compiled with a backend, and records what a user would look at.

- graph:   straight-line code over odd/empty shapes (expressions.py); outputs and gradients.
- inplace: graph code plus in-place updates of intermediates (add_, mul_, +=, clamp_, relu_, zero_,
           fill_, copy_, t[idx] = v, updates through a view).
- mutate:  the function updates its inputs under no_grad (and a buffer input without it) and reads
           them afterwards; called twice; outputs, gradients and the inputs after each call.
- alias:   one tensor passed as two arguments, a tensor with its view or detached alias, a tensor
           passed and also captured as a global; called with changing aliasing patterns.
- state:   the function reads globals (a Python float, a flag it branches on, a tensor) that change
           between calls: guards or runtime inputs, never baked in.
- reads:   the function reads Python values through every kind of holder (helpers' globals, module
           attributes of every kind, config objects, closure cells, NumPy arrays, -0.0 and NaN
           arguments) that change between calls (reads.py).
- numeric: float16 reductions over values that overflow float16 sums, integer division and
           out-of-range Python ints (numeric.py; these pick their own dtype).
- train:   a model and an optimizer (SGD with momentum/weight decay, Adam), a compiled training
           step called several times with state changes between calls (learning rate set to 0 or
           changed, eval()/train(), a parameter or a submodule replaced, parameters edited under
           no_grad, the dropout rate changed), parameters passed as arguments *and* held by the
           optimizer, and an eval call under no_grad; losses and parameters after every call.
- jvp, penalty: forward mode through a compiled call, and create_graph inside one (modes.py).
"""
import numpy as np

from .expressions import bshape, graph_builder as _graph_builder, returns as _returns
from .modes import _jvp, _penalty  # noqa: F401  (generate() finds each kind's maker by name)
from .numeric import numeric as _numeric
from .reads import reads_program
from .source import Program
from .training import _train

KINDS = ("graph", "inplace", "mutate", "alias", "train", "state", "reads", "numeric", "jvp", "penalty")
WEIGHTS = (0.22, 0.11, 0.11, 0.09, 0.12, 0.07, 0.08, 0.08, 0.06, 0.06)


def generate(index, seed, dtype=None, kind=None):
    """Program number `index` of the stream `seed` (the same pair gives the same program; `kind` and
    `dtype` override what was drawn, the rest of the program stays as drawn)."""
    rng = np.random.default_rng([seed, index])
    drawn_kind, drawn_dtype = KINDS[int(rng.choice(len(KINDS), p=WEIGHTS))], rng.random()
    kind, dtype = kind or drawn_kind, dtype or ("float32" if drawn_dtype < 0.6 else "float64")
    pseed = int(rng.integers(2**31))
    make = _train if kind == "train" else globals()["_" + kind]
    program = make(rng, index, pseed, dtype)
    program.stream = seed
    return program


# ---------------------------------------------------------------- graph-based kinds

GRAPH_RUN = ["xs = inputs(dtype)", "fn = f if mode == 'eager' else tg.compile(f, backend=mode)",
             "rec.backward_steps(fn, xs)", "rec.grads(rec.outputs(fn(*xs)), xs)"]


def _graph(rng, index, seed, dtype):
    b = _graph_builder(rng)
    for _ in range(int(rng.integers(1, 9))):
        b.step()
    return Program("graph", index, seed, dtype, b.inputs, b.lines, _returns(b, rng), GRAPH_RUN)


INPLACE = ["{t}.add_({w})", "{t}.mul_({w})", "{t}.sub_({w} * 0.5)", "{t}.div_({w} * {w} + 1.0)", "{t} += {w}",
           "{t} -= {w}", "{t} *= 0.5", "{t} /= 2.0", "{t}.clamp_(-1.0, 1.0)", "{t}.relu_()", "{t}.neg_()",
           "{t}.exp_()", "{t}.pow_(2)", "{t}.zero_()", "{t}.fill_(0.5)", "{t}.copy_({w})"]


def _inplace_block(b, rng):
    floats = b.floats()
    v = b.pick(floats)
    t = b.emit(f"{v.name}.clone()" if rng.random() < 0.7 else f"{v.name} * 1.0", v.shape)
    if t is None:
        return
    for _ in range(int(rng.integers(1, 3))):
        ws = [w for w in floats if bshape(w.shape, t.shape) == t.shape]
        form = b.pick(INPLACE + ["setitem", "setitem", "view"])
        if form == "setitem" and t.shape and t.shape[0]:
            i = int(rng.integers(0, t.shape[0]))
            rhs = b.pick(["0.25", f"{t.name}[{i}] * 2.0", f"{t.name}[{i}].exp()"])
            b.lines.append(f"{t.name}[{i}] = {rhs}" if rng.random() < 0.5 else f"{t.name}[{i}:] = {rhs}")
        elif form == "view" and len(t.shape) >= 2:
            b.lines.append(b.pick([f"{t.name}[0].mul_(2.0)", f"{t.name}.transpose(0, 1)[0].add_(1.0)",
                                   f"{t.name}[:, 1:].zero_()"]))
        elif form in ("setitem", "view"):
            b.lines.append(f"{t.name}.mul_(-1.5)")
        elif "{w}" in form:
            if not ws:
                continue
            b.lines.append(form.format(t=t.name, w=b.pick(ws).name))
        else:
            b.lines.append(form.format(t=t.name))


def _inplace(rng, index, seed, dtype):
    b = _graph_builder(rng)
    for _ in range(int(rng.integers(1, 6))):
        if rng.random() < 0.5:
            _inplace_block(b, rng)
        b.step()
    return Program("inplace", index, seed, dtype, b.inputs, b.lines, _returns(b, rng), GRAPH_RUN)


NOGRAD_UPDATE = ["{p}.mul_(2.0)", "{p}.add_({w})", "{p}.sub_({w} * 0.1)", "{p}.copy_({w} * 3.0)",
                 "{p}.clamp_(-0.5, 0.5)", "{p}.zero_()", "{p}[0] = 7.0", "{p} += 1.0",
                 "{p}.detach().mul_(0.5)", "{p}.data.add_(1.0)"]   # aliases of the storage


def _mutate(rng, index, seed, dtype):
    b = _graph_builder(rng, 2)
    p = b.pool[0]
    buf = b.add_input(p.shape, grad=False) if rng.random() < 0.5 else None
    for k in range(int(rng.integers(2, 6))):
        if k == 0 or rng.random() < 0.15:
            ws = [w for w in b.floats() if bshape(w.shape, p.shape) == p.shape and w is not p]
            form = b.pick(NOGRAD_UPDATE)
            if "{w}" in form and not ws or form.startswith("{p}[0]") and not (p.shape and p.shape[0]):
                form = "{p}.mul_(2.0)"
            b.lines.append("with tg.no_grad():\n    " + form.format(p=p.name, w=b.pick(ws).name if ws else ""))
            b._binary(p)                       # read the updated input
        else:
            b.step()
    if buf is not None:
        src = b.pick([v for v in b.floats() if bshape(v.shape, buf.shape) == buf.shape] or [p])
        b.lines.append(f"{buf.name}.mul_(0.9).add_({src.name}.detach() * 0.1)")
    run = ["xs = inputs(dtype)", "fn = f if mode == 'eager' else tg.compile(f, backend=mode)",
           "for k in range(2):",
           "    rec.grads(rec.outputs(fn(*xs), f'call{k}.out'), xs, f'call{k}.grad')",
           "    rec.outputs(xs, f'call{k}.after.x')"]
    program = Program("mutate", index, seed, dtype, b.inputs, b.lines, _returns(b, rng), run)
    program.notes = ["first call", "second call (inputs updated by the first)"]
    return program


ALIAS_CALLS = ["(a, b)", "(a, a)", "(a, a.view(a.shape))", "(a, a.detach())", "(b, a)", "(a, b.detach())"]


def _alias(rng, index, seed, dtype):
    b = _graph_builder(rng, 2, same_shape=True)
    header, captured = [], rng.random() < 0.3
    if captured:                              # the second input is also read as a global
        header = ["G = {}", ""]
        b.lines.append("g = G['w'] * 1.0")
        b.pool.append(type(b.pool[0])("g", b.pool[1].shape))
    for k in range(int(rng.integers(1, 6))):
        if rng.random() < 0.2:
            a = b.pool[int(rng.integers(2))]
            b.lines.append("with tg.no_grad():\n    " + b.pick(["{p}.mul_(2.0)", "{p}.add_(1.0)"]).format(p=a.name))
            b._binary(a)
        else:
            b.step()
    if rng.random() < 0.3:
        b.lines.append(f"{b.pool[1].name}.data.mul_(0.5)" if rng.random() < 0.5 else
                       "with tg.no_grad():\n    x1.add_(x0)")
    calls = ["(a, b)"] + [ALIAS_CALLS[int(i)] for i in rng.integers(1, len(ALIAS_CALLS), int(rng.integers(2, 4)))]
    run = ["xs = inputs(dtype)", "a, b = xs[0], xs[1]",
           *(["G['w'] = b"] if captured else []),
           "fn = f if mode == 'eager' else tg.compile(f, backend=mode)",
           f"for k, args in enumerate([{', '.join(calls)}]):",
           "    rec.grads(rec.outputs(fn(*args, *xs[2:]), f'call{k}.out'), xs, f'call{k}.grad')",
           "    rec.outputs(xs, f'call{k}.after.x')"]
    program = Program("alias", index, seed, dtype, b.inputs, b.lines, _returns(b, rng), run, header)
    program.notes = [f"f{c}" + (" with b also global G['w']" if captured else "") for c in calls]
    return program


STATE_CHANGES = ["G['scale'] = 2.0", "G['scale'] = -0.25", "G['flag'] = not G['flag']", "G['t'] = G['t'] * 2.0",
                 "with tg.no_grad():\n    G['t'].add_(1.0)", "G['t'] = G['t'].double()", "G['n'] = G['n'] + 1"]


def _state(rng, index, seed, dtype):
    b = _graph_builder(rng, 1)
    x = b.pool[0]
    b.lines += [f"v0 = {x.name} * G['scale'] + G['t']",
                "v1 = v0.tanh() if G['flag'] else v0.relu()",
                f"v2 = v1.sum() * G['n'] if v1.ndim else v1 * G['n']"]
    for name, shape in (("v0", x.shape), ("v1", x.shape), ("v2", ())):
        b.pool.append(type(x)(name, shape))
    b.lines = [line for line in b.lines]
    for _ in range(int(rng.integers(0, 4))):
        b.step()
    calls, notes = [], []
    for k in range(int(rng.integers(2, 5))):
        change = b.pick(STATE_CHANGES) if k else ""
        calls.append((change + "\n" if change else "") +
                     f"rec.grads(rec.outputs(fn(*xs), 'call{k}.out'), xs, 'call{k}.grad')")
        notes.append(f"after {change.splitlines()[-1].strip()}" if change else "first call")
    run = ["xs = inputs(dtype)", f"G.update(scale=0.5, flag=True, n=3, t=data(np.random.default_rng(1), "
           f"{x.shape!r}, dtype))", "fn = f if mode == 'eager' else tg.compile(f, backend=mode)"]
    program = Program("state", index, seed, dtype, b.inputs, b.lines, _returns(b, rng), run, ["G = {}", ""],
                      calls=calls)
    program.notes = notes
    return program


def _reads(rng, index, seed, dtype):
    return reads_program(_graph_builder(rng, 1), rng, index, seed, dtype)

