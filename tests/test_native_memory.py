"""What native code may touch: a kernel writing an output into its input's memory (an update under
no_grad) addresses it through one pointer, so the forward's reads of the old value (saved for the
backward) and of the new one keep their order; a matrix product writes only inside its output
(empty batches included). Generated programs compared with eager (values and gradients), and the
fuzzer's own mutate/alias programs."""
import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

import tracegrad as tg
from tracegrad.fuzz.programs import generate
from tracegrad.fuzz.runner import check

UPDATES = {
    "add_w": lambda p, w: p.add_(w),
    "add_1": lambda p, w: p.add_(1.0),
    "mul_2": lambda p, w: p.mul_(2.0),
    "sub_w": lambda p, w: p.sub_(w * 0.5),
}
READS = {   # each needs the updated p (or a value of it) in the backward
    "pow": lambda p, q: (q.abs() + 0.5) ** p,
    "layer_norm": lambda p, q: tg.nn.functional.layer_norm(p, (p.shape[-1],)) * q,
    "mul": lambda p, q: p * q,
    "exp_mul": lambda p, q: (p * q).exp(),
    "tanh_sum": lambda p, q: p.tanh() * q + p.sum(-1, keepdims=True),
}


def _run(update, read, backend, arrays):
    p, q, w = (tg.tensor(a.copy(), requires_grad=i < 2) for i, a in enumerate(arrays))

    def f(p, q, w):
        with tg.no_grad():
            UPDATES[update](p, w)
        return READS[read](p, q)

    fn = f if backend == "eager" else tg.compile(f, backend=backend)
    got = []
    for _ in range(2):                 # the second call starts from the updated p
        out = fn(p, q, w)
        (out * out).sum().backward()
        got += [out.detach().numpy(), p.detach().numpy().copy(), p.grad.numpy(), q.grad.numpy()]
        p.grad = q.grad = None
    return got


@settings(max_examples=12, deadline=None)
@example(update="add_1", read="pow", shape=(2, 3), dtype=np.float32, seed=1)          # failed before the fix
@example(update="sub_w", read="tanh_sum", shape=(4, 5), dtype=np.float64, seed=1)     # failed before the fix
@given(update=st.sampled_from(sorted(UPDATES)), read=st.sampled_from(sorted(READS)),
       shape=st.sampled_from([(2, 3), (3,), (4, 5), (1, 7)]), dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 2**16))
def test_updated_input_read_before_and_after_the_update_matches_eager(update, read, shape, dtype, seed):
    rng = np.random.default_rng(seed)
    arrays = [(rng.standard_normal(shape) * 0.5).astype(dtype) for _ in range(3)]
    want = _run(update, read, "eager", arrays)
    got = _run(update, read, "llvm", arrays)
    tol = 1e-4 if dtype == np.float32 else 1e-9
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


@pytest.mark.parametrize("kind,index", [("mutate", 61), ("alias", 20)])
def test_fuzzer_programs_updating_inputs_match_eager(kind, index):
    """The fuzzer's programs 61 (mutate) and 20 (alias) of stream 23 found the llvm case."""
    _, problems = check(generate(index, 23, kind=kind), ("llvm",))
    assert not problems, problems


def _product_kernel(a_shape, b_shape):
    from tracegrad.ir import parse
    from tracegrad.ir.passes.fusion import fuse
    t = lambda s: f"f32[{','.join(map(str, s))}]"          # noqa: E731
    out = np.broadcast_shapes(a_shape[:-2], b_shape[:-2]) + (a_shape[-2], b_shape[-1])
    g = parse(f"graph f(%a: {t(a_shape)}, %b: {t(b_shape)}) {{\n  %0: {t(out)} = matmul(%a, %b)\n  return %0\n}}")
    return next(k for k in fuse(g)[0] if k.kind == "extern")


@settings(max_examples=30, deadline=None)
@given(batch=st.sampled_from([(0,), (2, 0), (0, 3), (3,), ()]), m=st.integers(0, 3), k=st.integers(0, 3),
       n=st.integers(0, 17), broadcast=st.booleans(), dtype=st.sampled_from([np.float32, np.float64]))
def test_products_with_empty_sizes_match_numpy_and_stay_in_their_memory(batch, m, k, n, broadcast, dtype):
    """An empty batch ran one BLAS call into the empty output (heap corruption, fuzz seed 24 program 463):
    every empty product now runs NumPy's matmul, values and gradients as eagerly."""
    rng = np.random.default_rng(m + 4 * k + 16 * n)
    a = rng.standard_normal(batch + (m, k)).astype(dtype)
    b = rng.standard_normal((k, n) if broadcast else batch + (k, n)).astype(dtype)
    f = tg.compile(lambda x, y: x @ y, backend="llvm")
    want = a.astype(np.float64) @ b
    g = 2 * want                                            # d sum(out^2) / d out
    want_ga = g @ np.swapaxes(b, -1, -2)
    want_gb = np.swapaxes(a, -1, -2).astype(np.float64) @ g
    if broadcast:                                           # b was broadcast over the batch: summed
        want_gb = want_gb.sum(axis=tuple(range(len(batch))))
    for _ in range(2):
        x, y = tg.tensor(a, requires_grad=True), tg.tensor(b, requires_grad=True)
        out = f(x, y)
        (out * out).sum().backward()
        for got, ref in ((out.detach(), want), (x.grad, want_ga), (y.grad, want_gb)):
            assert got.shape == ref.shape
            np.testing.assert_allclose(got.numpy(), ref, rtol=1e-4, atol=1e-4)


def test_blas_plans_that_would_leave_their_buffers_are_refused():
    from tracegrad.backends.cpu import driver
    kernel = _product_kernel((2, 3, 4), (2, 4, 5))      # b batched too: the batch stays a loop (gemm.fold_rows)
    plan = driver.gemm_plan(kernel)
    assert plan is not None and plan["batch"] == (2,)
    for change in ({"m": 4}, {"n": 6}, {"k": 5}, {"batch": (3,)}, {"a": (1, plan["a"][1])}, {"dtype": "float64"},
                   {"batch": (0,)}, {"m": 0}):
        with pytest.raises(RuntimeError, match="internal error: .*BLAS call"):
            driver._check_extents(kernel, {**plan, **change})
    assert driver.gemm_plan(_product_kernel((0, 3, 4), (4, 5))) is None
