"""Sums of matrix products as one product: in a sum a_1 + a_2 + ..., the terms that are 2-D products
A_i @ B_i of the same [M, N] result, read by nothing but the sum, become one product
cat(A_i, axis 1) @ cat(B_i, axis 0) of inner size K_1 + K_2 + ... (exact but for rounding: BLAS sums
the inner axis in its own order). A transposed operand is joined before its transpose: the A_i = a_i^T
as cat(a_i, axis 0)^T, so the joined operand is whole row blocks one after another.

Where such sums come from: a weight used at every step of a loop (a recurrent layer's W_hh over T
steps, a weight shared by several layers) gets as gradient the sum over its uses of dY_t^T @ X_t,
T products of inner size batch, each a BLAS call (and on a 2-core host a thread split), then a
T-way sum of [M, N] matrices. W11 (2-layer LSTM, T=32, batch 32, hidden 128), per layer: 32
products of 512x32x128 (one thread ~50 us of CPU each) and a 32-way sum (~0.35 ms) became one
512x1024x128 product (~1.7 ms) whose left operand is the cat of the gate gradients the input
weights' gradient reads anyway (_existing_left): no copy of them. Joined operands made by a new cat
cost a copy; the gain is then fewer calls and splits rather than fewer flops.

A term joins only where its inner size is at most MAX_INNER (a larger product already runs at BLAS's
rate, and joining would copy its operands for nothing) and its sizes are known (symbolic sizes are
left alone); at least two terms must join."""
from ...ops import PRIMS
from ...symint import is_sym, same_shape
from .rewrite import Builder

MAX_INNER = 256         # inner size of a term, at most
BUDGET = 4096           # nodes of a sum tree looked into, at most


def join_product_sums(graph):
    """`graph` itself when no sum has two products to join, else a rewritten copy."""
    uses, users = {}, {}
    for n in graph.nodes:
        for i in n.inputs:
            uses[id(i)] = uses.get(id(i), 0) + 1
            users[id(i)] = n
    for v in graph.outputs:
        uses[id(v)] = uses.get(id(v), 0) + 2
    roots = {}
    for n in graph.nodes:
        if _is_sum(n) and not (uses.get(id(n.out)) == 1 and _is_sum(users[id(n.out)])):
            terms = _terms(n, uses)
            if sum(_joinable(t, uses) for t in terms) >= 2:
                roots[id(n)] = terms
    if not roots:
        return graph
    b = Builder(graph)
    b.row_cats = _row_cats(graph)
    for n in graph.nodes:
        terms = roots.get(id(n))
        b.env[id(n.out)] = b.copy(n) if terms is None else _joined(b, n, terms, uses)
    return b.finish()


def _row_cats(graph):
    """{frozenset of ids of 2-D values: (cat value, those values in its order)} for the cats along axis 0
    whose pieces are 2-D values, or such values with a leading unit axis added (a stack): the cat,
    reshaped to 2-D, is those values' rows one block after another."""
    out = {}
    for n in graph.nodes:
        if n.op != "cat" or n.attrs["axis"] != 0:
            continue
        rows = [p.node.inputs[0] if p.node is not None and p.node.op == "reshape" and len(p.shape) == 3
                and same_shape(p.shape, (1,) + tuple(p.node.inputs[0].shape)) else p for p in n.inputs]
        if all(len(r.shape) == 2 for r in rows) and len({id(r) for r in rows}) == len(rows):
            out[frozenset(id(r) for r in rows)] = (n.out, rows)
    return out


def _is_sum(n):
    """n adds two values of its own type (no broadcast)."""
    return n.op == "add" and all(same_shape(i.shape, n.out.shape) and i.dtype is n.out.dtype for i in n.inputs)


def _terms(root, uses):
    """The terms of the sum tree at `root`: values its adds (those read only by the tree) sum."""
    out, stack, seen = [], list(reversed(root.inputs)), 0
    while stack:
        v = stack.pop()
        seen += 1
        if v.node is not None and _is_sum(v.node) and uses.get(id(v)) == 1 and seen < BUDGET:
            stack.extend(reversed(v.node.inputs))
        else:
            out.append(v)
    return out


def _joinable(v, uses):
    n = v.node
    if n is None or n.op != "matmul" or uses.get(id(v)) != 1 or not v.dtype.is_floating_point:
        return False
    a, b = n.inputs
    if len(a.shape) != 2 or len(b.shape) != 2 or any(is_sym(s) for s in a.shape + b.shape):
        return False
    return a.dtype is v.dtype and b.dtype is v.dtype and 0 < a.shape[1] <= MAX_INNER


def _joined(b, n, terms, uses):
    """The sum at node n with its joinable products as one: the other terms, then the product."""
    products = [t.node for t in terms if _joinable(t, uses)]
    a = _existing_left(b, products)
    if a is None:
        a = _cat(b, [b.get(p.inputs[0]) for p in products], 1)
    else:
        a, products = a
    c = _cat(b, [b.get(p.inputs[1]) for p in products], 0)
    out = _emit(b, "matmul", [a, c], n.loc)
    for t in terms:
        if not _joinable(t, uses):
            out = _emit(b, "add", [b.get(t), out], n.loc)
    return out


def _existing_left(b, products):
    """(the joined left operand, the products in its order) where the left operands are transposes
    of the row blocks of a cat the graph has already (an RNN's gate gradients, also stacked over
    time for the input weights' gradient), else None."""
    lefts = [_plain(p.inputs[0]) for p in products]
    if not all(_transposed(v) for v in lefts):
        return None
    found = b.row_cats.get(frozenset(id(v.node.inputs[0]) for v in lefts))
    if found is None or len(found[1]) != len(lefts):
        return None
    cat, rows = found
    at = {id(r): k for k, r in enumerate(rows)}
    products = sorted(products, key=lambda p: at[id(_plain(p.inputs[0]).node.inputs[0])])
    flat = _emit(b, "reshape", [b.get(cat)], None, shape=(sum(r.shape[0] for r in rows), rows[0].shape[1]))
    return _emit(b, "permute", [flat], None, perm=(1, 0)), products


def _plain(v):
    """v without pairs of transposes around it (x.T.T is x)."""
    while _transposed(v) and _transposed(v.node.inputs[0]):
        v = v.node.inputs[0].node.inputs[0]
    return v


def _transposed(v):
    return v.node is not None and v.node.op == "permute" and v.node.attrs["perm"] == (1, 0)


def _cat(b, parts, axis):
    """cat(parts, axis) of 2-D values; of transposed values, the transpose of their cat on the other
    axis (row blocks of the untransposed ones)."""
    parts = [_plain(p) for p in parts]
    if all(_transposed(p) for p in parts):
        joined = _emit(b, "cat", [p.node.inputs[0] for p in parts], None, axis=1 - axis)
        return _emit(b, "permute", [joined], None, perm=(1, 0))
    return _emit(b, "cat", parts, None, axis=axis)


def _emit(b, op, inputs, loc, **attrs):
    shape, dtype = PRIMS[op].rule([v.shape for v in inputs], [v.dtype for v in inputs], **attrs)
    return b.emit(op, inputs, attrs, shape, dtype, loc)
