"""Programs that differentiate through a compiled call in the other modes (see programs.py):

- jvp:     graph code called under tg.jvp (forward mode) with a tangent per input, twice (the twin's
           trace, then its cached entry); outputs and their tangents.
- penalty: graph code whose compiled function takes the gradient of one of its values with
           create_graph=True (as a gradient penalty does) and returns that value plus the squared
           gradients; called twice; outputs and the gradients of the outer backward."""
from .expressions import graph_builder as _graph_builder, returns as _returns
from .source import Program


def _jvp(rng, index, seed, dtype):
    b = _graph_builder(rng)
    for _ in range(int(rng.integers(1, 9))):
        b.step()
    run = ["xs = inputs(dtype)",
           "ts = [data(np.random.default_rng(7 + k), tuple(x.shape), dtype) for k, x in enumerate(xs)]",
           "fn = f if mode == 'eager' else tg.compile(f, backend=mode)",
           "for k in range(2):",
           "    out, tangent = tg.jvp(fn, xs, ts)",
           "    rec.outputs(out, f'call{k}.out')",
           "    rec.outputs(tangent, f'call{k}.tangent')"]
    return Program("jvp", index, seed, dtype, b.inputs, b.lines, _returns(b, rng), run)


def _penalty(rng, index, seed, dtype):
    b = _graph_builder(rng)
    for _ in range(int(rng.integers(1, 7))):
        b.step()
    value = b.pick([v for v in b.floats() if v.name.startswith("v")] or b.floats())
    inputs = ", ".join(name for name, _, o in b.inputs if o.get("grad"))
    coef = b.pick(["0.5", "1.0", "10.0"])
    b.lines += [f"s = {value.name}.sum()",      # (a value of comparisons, an argmax, floor: no gradient)
                f"gs = tg.autograd.grad(s, [{inputs}], create_graph=True, allow_unused=True) "
                f"if s.requires_grad else ()",
                f"penalty = s + {coef} * sum((g * g).sum() for g in gs if g is not None)"]
    run = ["xs = inputs(dtype)", "fn = f if mode == 'eager' else tg.compile(f, backend=mode)",
           "for k in range(2):",
           "    rec.grads(rec.outputs(fn(*xs), f'call{k}.out'), xs, f'call{k}.grad')"]
    program = Program("penalty", index, seed, dtype, b.inputs, b.lines, ["penalty"] + _returns(b, rng), run)
    program.notes = ["first call", "second call (the cached entry)"]
    return program
