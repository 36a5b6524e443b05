"""Which phases of a kernel one walk over memory can compute (facts, no decisions): phases that read
no result of each other share a walk over the row (`walks`); a maximum and a sum of exp(a - g(max))
are one online walk over rows (`online_pairs`) or columns (`online_columns`), the running sum
rescaled as the maximum grows. Fusion asks them; the CPU planner (backends/cpu/plan/) walks so."""
from .. import scalar as S
from ..scalar import head
from .kernels import applies, hinted, loads
from .layout import read_bytes, unit_axis


def walks(k, pairs=()):
    """The walks of row kernel k (Schedule.walks): phase by phase, each joins the first walk after
    those of the phases it reads; an online pair is a walk of its own. () when no walk holds two
    phases (one walk per phase, as without a schedule)."""
    made = {id(v): j for j, ph in enumerate(k.phases) for v, _ in ph.outputs}
    online = {i + d for i, _ in pairs for d in (0, 1)}
    groups, where = [], {}
    for j, ph in enumerate(k.phases):
        if j in online:
            if j - 1 not in online or (j - 1, j) not in pairs:
                groups.append([j])
            else:
                groups[-1].append(j)
            where[j] = len(groups) - 1
            continue
        after = max((where[made[id(ld.buf)]] for _, t in ph.outputs for ld in loads(t) if id(ld.buf) in made),
                    default=-1)
        free = [w for w in range(after + 1, len(groups)) if not set(groups[w]) & online]
        if free:
            groups[free[0]].append(j)
        else:
            groups.append([j])
        where[j] = free[0] if free else len(groups) - 1
    return [sorted(g) for g in groups] if any(len(g) > 1 and not set(g) & online for g in groups) else []


def _joins(ph, fn):
    """Whether reduce phase ph joins an element to its accumulator with vocabulary function fn."""
    return head(ph.lower) is fn


def exp_shift(tree, m):
    """(a, g) when `tree` is exp(a - g) where g reads buffer m (and nothing else) and a does not; else None."""
    if not (applies(tree, S.exp) and applies(tree.args[0], S.SUB)):
        return None
    a, g = tree.args[0].args
    g_loads = loads(g)
    if not g_loads or any(ld.buf is not m for ld in g_loads) or any(ld.buf is m for ld in loads(a)):
        return None
    return a, g


def online_pairs(k):
    """[(i, i + 1)]: a row kernel's reduce-max phase i (float m) followed by a phase summing
    exp(a - g(m)) into a value of m's dtype (see Schedule.online)."""
    pairs = []
    for i, (p, q) in enumerate(zip(k.phases, k.phases[1:])):
        inner = set(range(k.split, len(k.shape)))
        if p.kind != "reduce" or q.kind != "reduce" or not _joins(p, S.maximum) or not _joins(q, S.ADD) or \
                set(p.axes) != inner or set(q.axes) != inner or (pairs and pairs[-1][1] == i):
            continue
        (m, _), = p.outputs
        (s, tree), = q.outputs
        if m.dtype.is_floating_point and s.dtype == m.dtype == tree.dtype and exp_shift(tree, m):
            pairs.append((i, i + 1))
    return pairs


def _reads(tree, m):
    return any(ld.buf is m for ld in loads(tree))


def rescaled(tree, m):
    """Whether `tree` is linear in exp(a - g(m)) (exp_shift): that exp, or it times, divided by or negated
    around a value that does not read m; an online walk then rescales its running sum as the maximum
    grows (a softmax's sum of exp, the backward's sum of g * exp, logsumexp's guard times inf)."""
    if exp_shift(tree, m):
        return True
    if not any(applies(tree, fn) for fn in (S.NEG, S.MUL, S.DIV)):
        return False
    a, *rest = tree.args
    if applies(tree, S.NEG):
        return rescaled(a, m)
    b = rest[0]
    return (rescaled(a, m) and not _reads(b, m)) or (applies(tree, S.MUL) and rescaled(b, m) and not _reads(a, m))


def online_columns(k):
    """The pairs [(i, j)] of reduce_acc kernel k's phases that one walk over its columns computes: a
    float maximum m (phase i) and a sum that reads it only as rescaled(tree, m) (phase j), beside
    reductions that read neither, all over the same leading axes, its kept axes trailing, the last one
    the unit-stride axis of its largest read (Schedule.online; the CPU's online column walk,
    backends/cpu/online_columns.py). None where k is not such a kernel. Fusion asks it of kernels
    it may merge; the CPU planner walks them so."""
    k = hinted(k)                   # heuristics on the hints: they change speed only
    n = len(k.shape)
    if k.kind != "reduce_acc" or n < 2 or 0 in k.shape or any(ph.kind != "reduce" for ph in k.phases):
        return None
    axes = set(k.phases[0].axes)
    r = len(axes)
    if axes != set(range(r)) or r == n or any(set(ph.axes) != axes for ph in k.phases):
        return None
    reads = [(read_bytes(k.shape, ld), ld.strides) for ld in k.reads]
    if not reads or unit_axis(k.shape, max(reads, key=lambda o: o[0])[1]) != n - 1:
        return None                 # no reads: reductions of constants (a zeroed tensor's maximum)
    outs = [ph.outputs[0] for ph in k.phases]
    maxima = {id(v): i for i, (ph, (v, t)) in enumerate(zip(k.phases, outs))
              if _joins(ph, S.maximum) and v.dtype.is_floating_point and not any(
                  ld.buf is w for ld in loads(t) for w, _ in outs)}
    pairs = []
    for j, (ph, (s, tree)) in enumerate(zip(k.phases, outs)):
        read = [i for i, (w, _) in enumerate(outs) if _reads(tree, w)]
        if not read:
            continue
        if len(read) > 1 or id(outs[read[0]][0]) not in maxima or not _joins(ph, S.ADD):
            return None
        m = outs[read[0]][0]
        if not (s.dtype == m.dtype == tree.dtype and rescaled(tree, m)):
            return None
        pairs.append((read[0], j))
    return pairs or None
