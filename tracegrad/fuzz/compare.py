"""When a backend's run counts as agreeing with eager.

Tolerances (`allowed`): a compiled value c is compared with the float64 eager run r of the same
program (for float64 programs r is the eager run itself) and may differ from it by

    K * |e - r| + RTOL * |r| + ATOL * max(1, max|r| over the array)

where e is the eager run in the program's own dtype: a compiled result may be a few times less
accurate than eager float32 is (fused kernels reassociate sums and use their own exp/tanh/...),
plus a small relative term and an absolute floor scaled by the array's magnitude (cancellation in
reductions). float32: K=4, RTOL=ATOL=1e-4; float64: K=0, RTOL=ATOL=1e-6; float16 (compared with
eager float16: a compiled float32 kernel rounded to float16 may land one float16 step away):
K=0, RTOL=ATOL=2e-3 — by the program's dtype,
also for values a float32 program computes in float64 (`.double()`), since r ran on float64
inputs and e on their float32 roundings. Where eager gives NaN or
±inf, the backend must give exactly the same, except where the value overflowed: the float64 run's
value is finite but beyond the dtype's range. There any NaN or ±inf agrees: which one a sum of
overflowed terms gives depends on the order its kernel adds them in (a BLAS product's NaN, -inf or
+inf for the same row changes with the matrix's shape even in NumPy: tests/test_fuzz_overflow.py). Bool and integer values must be equal, except where
eager in the program's dtype already disagrees with the float64 run (a comparison of two values
closer than float32 rounding). Shapes and dtypes must be equal.
"""
import re

import numpy as np

TOLERANCES = {"float16": (0.0, 2e-3, 2e-3), "float32": (4.0, 1e-4, 1e-4), "float64": (0.0, 1e-6, 1e-6)}


def category(label):
    """`call2.grad1` -> `call.grad`: the class of an observation (call and position numbers dropped)."""
    return re.sub(r"\b(call|out|grad|x)\d+|(?<=param)\..*", r"\1", label)


def compare_runs(eager, other, ref, dtype):
    """Problems of `other` against `eager` (observations, see runner.observe): a list of
    (category, text); categories are `error:<Type>`, `accepted` (eager raised, the backend did
    not), `structure`, `shape`, `dtype` and `value:<observation class>`."""
    if eager.error is not None or other.error is not None:
        if eager.error is not None and other.error is not None and eager.error[0] in other.kinds:
            return []          # the same error, or a subclass of it (a TraceError is a RuntimeError)
        if other.error is not None:
            return [(f"error:{other.error[0]}", f"raised {other.error[0]}: {other.error[1]}")]
        return [("accepted", f"eager raised {eager.error[0]}: {eager.error[1]}; the backend raised nothing")]
    el, ol = [k for k, _ in eager.items], [k for k, _ in other.items]
    if el != ol:
        return [("structure", f"observed {ol}, eager observed {el}")]
    refs = dict(ref.items) if ref.error is None and [k for k, _ in ref.items] == el else dict(eager.items)
    problems = []
    for (label, e), (_, c) in zip(eager.items, other.items):
        p = compare_values(e, c, refs[label], dtype)
        if p:
            kind, text = p
            problems.append((f"{kind}:{category(label)}" if kind == "value" else kind, f"{label}: {text}"))
    return problems


@np.errstate(all="ignore")
def compare_values(e, c, r, dtype):
    """None when c agrees with e (r: the float64 reference value), else (kind, text)."""
    if e is None or c is None:
        return None if e is None and c is None else ("structure", f"eager {_desc(e)}, backend {_desc(c)}")
    if e.shape != c.shape:
        return "shape", f"shape {c.shape}, eager {e.shape}"
    if e.dtype != c.dtype:
        return "dtype", f"dtype {c.dtype}, eager {e.dtype}"
    if r is None or r.shape != e.shape:
        r = e
    if e.dtype.kind != "f":
        bad = (e != c) & (np.asarray(r, e.dtype) == e)
        return ("value", _where(bad, e, c)) if bad.any() else None
    k, rtol, atol = TOLERANCES[dtype]      # by the program's dtype, whatever the value's (see above)
    e64, c64 = e.astype(np.float64), c.astype(np.float64)
    r64 = r.astype(np.float64) if r.dtype.kind == "f" else e64
    fin = np.isfinite(e64)
    overflowed = ~np.isfinite(c64) & np.isfinite(r64) & (np.abs(r64) > np.finfo(e.dtype).max)
    bad = ~fin & ~((c64 == e64) | (np.isnan(c64) & np.isnan(e64)) | overflowed)
    if fin.any():
        rf = np.where(np.isfinite(r64), r64, e64)
        scale = max(1.0, float(np.max(np.abs(rf[fin]))))
        allowed = k * np.abs(e64 - rf) + rtol * np.abs(rf) + atol * scale
        bad |= fin & ~(np.abs(c64 - rf) <= allowed)
    return ("value", _where(bad, e, c)) if bad.any() else None


def _where(bad, e, c):
    idx = np.argwhere(bad)
    first = tuple(int(i) for i in idx[0])
    text = f"{len(idx)} of {e.size} elements differ; first at {first}: backend {c[first]!r}, eager {e[first]!r}"
    if e.dtype.kind == "f":
        d = np.abs(c.astype(np.float64) - e.astype(np.float64))[bad]
        d = d[np.isfinite(d)]
        text += f" (max finite |diff| {float(d.max()):.3g})" if d.size else ""
    return text


def _desc(v):
    return "None" if v is None else f"array of shape {v.shape}"


class Observation:
    """What one run recorded: items [(label, array)], or the error it raised (type name, message);
    `kinds`: the names of the error's classes (its MRO), so that a subclass counts as the same error."""

    def __init__(self, items=(), error=None, kinds=(), traces=None):
        self.items, self.error, self.traces = list(items), error, traces     # traces: the --sizes record
        self.kinds = set(kinds) or ({error[0]} if error else set())
