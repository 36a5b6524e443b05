"""The `numeric` program kind: number formats where a fast path once computed the wrong value.

- float16: reductions and normalizations (mean, sum, var, std, norm, softmax, log_softmax,
  logsumexp, layer_norm, cumsum) over values large enough that float16 accumulation overflows
  (|x| ~ 300, ~1000, rows of up to 5000): PyTorch's rule is to reduce in float32 and store float16.
- integers (uint8 ... int64): div(rounding_mode="trunc"/"floor"), //, % (exact, never through a
  float), Python-int operands beyond the dtype's range (they wrap, as PyTorch's), comparisons with
  them, and divisors that are sometimes zero (both runs must raise).

These programs pick their own dtype (float16, or an integer type with `float64` as the program's
nominal dtype: exact comparisons, no float64 rerun)."""
import numpy as np

from .source import Program

F = "tg.nn.functional"
HALF_SCALES = ("1.0", "30.0", "300.0")
HALF_SHIFTS = ("0.0", "100.0", "1000.0")
HALF_REDUCE = [    # (pattern, how many axes it removes)
    ("{x}.mean({a})", 1), ("{x}.sum({a})", 1), ("{x}.var({a})", 1), ("{x}.norm(dim={a})", 1),
    ("{x}.logsumexp({a})", 1), (F + ".softmax({x}, {a})", 0), (F + ".log_softmax({x}, {a})", 0),
    ("{x}.cumsum({a})", 0), (F + ".layer_norm({x}, {x}.shape[-1:])", 0), ("{x}.mean({a}, keepdim=True) - {x}", 0),
    ("{x}.mean()", None), ("{x}.std()", None),
]
HALF_EW = ["{x} * 0.5", "{x}.tanh()", "{x} - 1.0", "{x}.abs()", "{x} * {x}"]
INT_DTYPES = ("uint8", "int8", "int16", "int32", "int64")
BIG_INTS = (300, -300, 1000, -129, 256, 70000, 2 ** 33, 2 ** 40, -(2 ** 40), 7, -3)
INT_OPS = [
    "tg.div({a}, {b}, rounding_mode='trunc')", "tg.div({a}, {b}, rounding_mode='floor')",
    "{a}.div({b}, rounding_mode='trunc')", "{a} // {b}", "{a} % {b}",
    "{a} + {k}", "{a} - {k}", "{a} * {k}", "{a} // {k}", "{a} % {k}", "tg.div({a}, {k}, rounding_mode='trunc')",
    "({a} == {k}).to({a}.dtype)", "({a} < {k}).to({a}.dtype)",
]


def numeric(rng, index, seed, dtype):
    return _half(rng, index, seed) if rng.random() < 0.5 else _integer(rng, index, seed)


def _pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


RUN = ["xs = inputs(dtype)", "fn = f if mode == 'eager' else tg.compile(f, backend=mode)",
       "rec.backward_steps(fn, xs)", "rec.grads(rec.outputs(fn(*xs)), xs)"]


def _half(rng, index, seed):
    rows, cols = int(_pick(rng, [1, 2, 3])), int(_pick(rng, [1, 7, 300, 5000]))
    inputs = [("x0", (rows, cols), dict(grad=True))]
    lines = [f"v0 = x0 * {_pick(rng, HALF_SCALES)} + {_pick(rng, HALF_SHIFTS)}"]
    cur, nd = "v0", 2
    for k in range(1, int(rng.integers(2, 5))):
        pattern, gone = _pick(rng, HALF_REDUCE) if k % 2 and nd else (_pick(rng, HALF_EW), 0)
        lines.append(f"v{k} = " + pattern.format(x=cur, a=int(rng.integers(-nd, max(nd, 1)))))
        cur, nd = f"v{k}", 0 if gone is None else nd - gone
    outs = sorted({f"v{len(lines) - 1}", f"v{int(rng.integers(1, len(lines)))}"})
    return Program("numeric", index, seed, "float16", inputs, lines, outs, RUN)


def _integer(rng, index, seed):
    dtype = _pick(rng, INT_DTYPES)
    info = np.iinfo(dtype)
    lo, hi = max(int(info.min), -1000), min(int(info.max), 1000)
    shape = (int(_pick(rng, [1, 3, 17])),)
    zeros = rng.random() < 0.1               # a divisor with zeros: eager and compiled must both raise
    inputs = [("x0", shape, dict(ints=(dtype, lo, hi, False))), ("x1", shape, dict(ints=(dtype, lo, hi, not zeros)))]
    pool, lines = ["x0", "x1"], []
    for k in range(int(rng.integers(1, 6))):
        a, b = _pick(rng, pool), "x1" if rng.random() < 0.7 else _pick(rng, pool)
        lines.append(f"v{k} = " + _pick(rng, INT_OPS).format(a=a, b=b, k=_pick(rng, BIG_INTS)))
        pool.append(f"v{k}")
    # every value is returned: compiled code drops an unused division, and with it its zero divisor
    return Program("numeric", index, seed, "float64", inputs, lines, pool[2:], RUN)
