"""How a matrix product's operands reach BLAS: each operand's transpose flag and leading dimension,
and batch axes folded into the rows where memory allows (one large call instead of a loop of small
ones).

`x @ w` with x [B, T, K] contiguous and w [K, N] is B products of T x K by K x N in a loop, but the
B row blocks of x lie one after the other at the rows' own stride and w is the same matrix for each:
it is one product of (B*T) x K by K x N, into an output whose blocks lie one after the other too.
OpenBLAS runs the one call at its full rate (on the 2-core bench host 512x384x128: 185 GFLOP/s)
where 8 calls of 64x384x128 reach 140 in NumPy's loop and 35-75 in W12's compiled step.
"""
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112


def operand(shape, strides):
    """How BLAS reads a matrix of `shape` (rows, cols) with element `strides`: (transposed, leading
    dimension), or None when neither axis has unit stride (or the other's stride is too small)."""
    (r, c), (sr, sc) = shape, strides
    if (c == 1 or sc == 1) and (r == 1 or sr >= max(1, c)):
        return NO_TRANS, sr if r > 1 else max(1, c)
    if (r == 1 or sr == 1) and (c == 1 or sc >= max(1, r)):
        return TRANS, sc if c > 1 else max(1, r)
    return None


def fold_rows(m, k, a_strides, batch, a_batch, b_batch):
    """Fold the innermost batch axes of a product into its rows: (m, a's operand, batch, a's batch
    strides, b's batch strides) after folding every innermost batch axis along which b is the same
    matrix (stride 0, or extent 1) and a's row blocks continue its rows at their own stride. The
    output (contiguous, m x n blocks) continues its rows along those axes by construction. Returns
    None when no axis folds."""
    sm, sk = a_strides
    batch, a_batch, b_batch = list(batch), list(a_batch), list(b_batch)
    folded = False
    while batch:
        size, sa = batch[-1], a_batch[-1]
        if size > 1:
            if b_batch[-1] != 0:
                break
            row = sm if m > 1 else sa       # one row: the batch stride becomes the row stride
            if sa != m * row or operand((m * size, k), (row, sk)) is None:
                break
            m, sm = m * size, row
        batch.pop(), a_batch.pop(), b_batch.pop()
        folded = True
    if not folded:
        return None
    return m, operand((m, k), (sm, sk)), tuple(batch), a_batch, b_batch
