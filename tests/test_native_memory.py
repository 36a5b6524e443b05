"""What native code may touch: a kernel writing an output into its input's memory (an update under
no_grad) addresses it through one pointer, so the forward's reads of the old value (saved for the
backward) and of the new one keep their order; a matrix product writes only inside its output
(empty batches included). Generated programs compared with eager (values and gradients), and the
fuzzer's own mutate/alias programs."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

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


@settings(max_examples=25, deadline=None)
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
