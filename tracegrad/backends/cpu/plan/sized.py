"""Schedules whose code is sized by the space, on kernels with symbolic sizes (tracegrad/symint.py): which
lowerings hold for every size (`generic`), and the ONE place where a kernel's sizes are compiled in
when its best schedule is not (`pin`, called by schedule.py's `schedule`)."""
from ....symint import Expr, SymInt, active, hint, is_sym, specialize
from ....ir.kernels import pinned


def pin(k, why):
    """The ONE place where a symbolic kernel's sizes become constants: the symbols a strategy needs fixed
    are specialized to their hints, recording the guards `S == hint` in the active ShapeEnv (a call with
    another size fails one and retraces, with that reason), and the kernel is rebuilt with those sizes
    as ints (ir/kernels.py's `pinned`). For the strategies whose code is sized by the space (`why`):
    by-rows vectors over a whole kept axis fix the kept axes' symbols only (the rows stay symbolic);
    register transposes and online column walks fix all. Natural order would run them several times
    slower (W7's column centering 9x). None where a symbol's hint is not read from a plain dim."""
    hints = {}
    for d in k.sizes():
        if is_sym(d) and len(d.expr.terms) == 1 and d.expr.terms[0][1] == 1 and len(d.expr.terms[0][0]) == 1 \
                and d.expr.terms[0][0][0][1] == 1:
            hints[d.expr.terms[0][0][0][0]] = hint(d)
    sizes = [k.shape[d] for d in range(k.split)] if k.schedule.rows and k.kind == "loop" else k.sizes()
    names = sorted(set().union(*(d.expr.symbols() for d in sizes if is_sym(d))))
    if any(s not in hints for s in names):
        return None
    for s in names:
        specialize(SymInt(Expr.symbol(s), hints[s]), f"{why} compiled in")      # records s == hint, naming why
    out = _fixed(k, {s: hints[s] for s in names})
    out.pinned_for = f"{why} compiled in: {', '.join(f'{s} == {hints[s]}' for s in names)}" if names else \
        getattr(k, "pinned_for", None)
    return out


def settled(k):
    """Kernel k with the symbols that guards already fixed to a number (the active ShapeEnv's `pinned`: by a
    `pin` of another kernel, or by the trace) as those numbers, records nothing (the program applies only
    where they hold); k itself where it reads none. Its loops then know those trip counts, as a static
    compile's (W7's centering: the rows' length pinned for one kernel, the others' inner loops sized by it
    at the call ran 1.2x slower)."""
    env = active()
    fixed = env.pinned() if env is not None and k.symbolic() else None
    if not fixed or not any(is_sym(d) and d.expr.symbols() & fixed.keys() for d in k.sizes()):
        return k
    out = _fixed(k, fixed)
    out.pinned_for = getattr(k, "pinned_for", None)
    return out


def _fixed(k, values):
    """Kernel k with symbols {name: int} `values` as those numbers (ir/kernels.py's `pinned`)."""
    subs = {s: Expr.const(n) for s, n in values.items()}

    def fix(d):
        if not is_sym(d):
            return d
        e = d.expr.subs(subs)
        return e.constant() if e.is_const() else SymInt(e, hint(d))
    return pinned(k, fix)


def strategy(sch):
    """The words naming what a non-generic Schedule compiles in."""
    return "vectors over the kept axis" if sch.rows else "register transposes" if sch.transposed else \
        "an online column walk"


def generic(sch):
    """Whether the LLVM lowering of Schedule `sch` reads no size as a constant: any loop order and tiling,
    reductions across a kept axis by tiles, row walks and online pairs (tile counts and ends are computed
    at the call); not by rows (a vector over the whole kept axis), register transposes or online
    column walks (their stack arrays and register tiles are sized by the space)."""
    return not (sch.rows or sch.transposed or sch.online and sch.across is not None)
