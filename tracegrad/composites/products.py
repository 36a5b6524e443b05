"""Products: einsum (pairwise contractions in the order given), outer, addmm, and lerp."""
import math

from ..tensor.base import TensorBase
from ..tensor.dispatch import _named


def _einsum_terms(equation, operands):
    """(input subscripts per operand, output subscripts) with '...' expanded to letters of its own."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(operands):
        raise ValueError(f"einsum(): the equation {equation!r} has {len(ins)} operands, {len(operands)} were given")
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in eq]
    ell = max([operands[k].ndim - len(s.replace("...", "")) for k, s in enumerate(ins) if "..." in s], default=0)
    dots = "".join(spare[:ell])
    terms = []
    for s, x in zip(ins, operands):
        if "..." in s:
            n = x.ndim - len(s.replace("...", ""))
            s = s.replace("...", dots[ell - n:] if n else "")
        if len(s) != x.ndim or not all(c.isalpha() for c in s):
            raise ValueError(f"einsum(): subscripts {s!r} do not match an operand of shape {list(x.shape)} "
                             f"in {equation!r}")
        if len(set(s)) != len(s):
            raise ValueError(f"einsum(): repeated subscripts within one operand ({s!r}: a diagonal) are not "
                             f"supported; take the diagonal with indexing first")
        terms.append(s)
    if arrow:
        out = rhs.replace("...", dots)
        if len(set(out)) != len(out) or any(c not in "".join(terms) for c in out):
            raise ValueError(f"einsum(): output subscripts {rhs!r} must be distinct and appear in an input")
    else:                                    # implicit: the letters seen once, in order, after '...'
        seen = "".join(terms)
        out = dots + "".join(sorted(c for c in set(seen) if seen.count(c) == 1 and c not in dots))
    return terms, out


def _einsum_pair(a, sa, b, sb, keep):
    """a (subscripts sa) times b (sb) summed over the letters not in `keep`: one batched matmul.
    Returns (result, its subscripts)."""
    only_a = [c for c in sa if c not in sb and c not in keep]
    only_b = [c for c in sb if c not in sa and c not in keep]
    if only_a:
        a, sa = a.sum(tuple(sa.index(c) for c in only_a)), "".join(c for c in sa if c not in only_a)
    if only_b:
        b, sb = b.sum(tuple(sb.index(c) for c in only_b)), "".join(c for c in sb if c not in only_b)
    batch = [c for c in sa if c in sb and c in keep]
    con = [c for c in sa if c in sb and c not in keep]
    left = [c for c in sa if c not in sb]
    right = [c for c in sb if c not in sa]
    size = {c: n for s, x in ((sa, a), (sb, b)) for c, n in zip(s, x.shape)}
    for c in batch + con:                    # a length 1 against another broadcasts
        size[c] = max(a.shape[sa.index(c)], b.shape[sb.index(c)])
    a = a.permute(*[sa.index(c) for c in batch + left + con])
    b = b.permute(*[sb.index(c) for c in batch + con + right])
    a = a.expand(*[size[c] for c in batch + left + con])
    b = b.expand(*[size[c] for c in batch + con + right])
    nb, nl, nc, nr = (math.prod(size[c] for c in cs) for cs in (batch, left, con, right))
    out = a.reshape(nb, nl, nc) @ b.reshape(nb, nc, nr)
    return out.reshape(tuple(size[c] for c in batch + left + right)), "".join(batch + left + right)


def einsum(equation, *operands):
    """Einstein summation, as torch.einsum: operands multiplied along shared subscripts and summed
    over those not in the output ('->' given, or the letters seen once), '...' for broadcast
    dimensions; pairs contract left to right as batched matrix products."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands or not all(isinstance(x, TensorBase) for x in operands):
        raise TypeError("einsum(): expected an equation and one or more tensors")
    terms, out = _einsum_terms(equation, operands)
    x, s = operands[0], terms[0]
    for k in range(1, len(operands)):
        keep = set(out) | {c for t in terms[k + 1:] for c in t}
        x, s = _einsum_pair(x, s, operands[k], terms[k], keep)
    gone = tuple(i for i, c in enumerate(s) if c not in out)
    if gone:
        x, s = x.sum(gone), "".join(c for c in s if c in out)
    return _named(x.permute(*[s.index(c) for c in out]) if len(out) > 1 else x * 1, "EinsumBackward")


def outer(a, b):
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"outer: expected 1-D vectors, got shapes {list(a.shape)} and {list(b.shape)}")
    return a.reshape(-1, 1) * b.reshape(1, -1)


def lerp(x, end, weight):
    return _named(x + weight * (end - x), "LerpBackward")


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    prod = mat1 @ mat2
    return _named((input if beta == 1 else input * beta) + (prod if alpha == 1 else prod * alpha), "AddmmBackward")
