"""Symbolic sizes on the cuda backend (issue 26, item 3): a function compiled with dynamic=True on cuda
tensors traces once and builds its device programs once; each call binds the sizes, and the launch grids,
loop bounds, strides, intermediates and split reductions' partials follow them. Values and gradients
against eager over sizes that mix 0, 1 and larger ones; kernel work counted by the programs built; the
guards no more than the CPU's (a cuda lowering that read a size as a number would pin it: `B == 5`)."""
import numpy as np
import pytest

import tracegrad as tg
import tracegrad.nn.functional as F
from tracegrad.backends.cuda import program

pytestmark = pytest.mark.skipif(not tg.cuda.is_available(), reason="needs CUDA or NUMBA_ENABLE_CUDASIM=1")

SIZES = [5, 1, 0, 3]


def _mlp(x, w1, b1, w2):
    return (F.relu(x @ w1 + b1) @ w2).tanh().sum()


def _rows(x, g):
    """Row kernels: softmax (online pairs), a layer norm with its weight's gradient summed over the rows."""
    return (x.softmax(1) * g).sum() + F.layer_norm(x, (x.shape[1],), g, None).square().sum()


def _columns(x, g):
    """Reductions over the symbolic axis (tiled, split into slices when long), and across a transpose."""
    return (x * g).sum(0).exp().sum() + x.t().contiguous().sum(1).square().sum() + (x.t() * 2).sum(0).sum()


def _maps(x, g):
    """Maps over (B, 8): 16-byte vector accesses (8 divides every B * 8), broadcasts and a count as a value."""
    y = (x * 2 + g).sigmoid() * x.shape[0]
    return y.sum() + (x - x.mean(1, keepdim=True)).abs().sum()


def _both(x):
    """Both dims symbolic: rows of symbolic length, reductions over both, a transpose."""
    return (x.log_softmax(1) * x).sum() + x.sum(0).square().sum() + (x.t() * x.t()).sum()


CASES = {
    "mlp": lambda b, rng: [rng.standard_normal((b, 6)), rng.standard_normal((6, 16)), rng.standard_normal(16),
                           rng.standard_normal((16, 3))],
    "rows": lambda b, rng: [rng.standard_normal((b, 24)), rng.standard_normal(24)],
    "columns": lambda b, rng: [rng.standard_normal((b, 3)), rng.standard_normal(3)],
    "maps": lambda b, rng: [rng.standard_normal((b, 8)), rng.standard_normal(8)],
    "both": lambda b, rng: [rng.standard_normal((b, b + 2))],
}
FUNCTIONS = {"mlp": _mlp, "rows": _rows, "columns": _columns, "maps": _maps, "both": _both}


def _tensors(arrays, device):
    return [tg.tensor(a.astype(np.float32), device=device, requires_grad=True) for a in arrays]


def _value_and_grads(f, ts):
    y = f(*ts)
    y.backward()
    return y.detach().cpu().numpy(), [t.grad.cpu().numpy() if t.grad is not None else None for t in ts]


@pytest.fixture
def builds(monkeypatch):
    """How many times device programs were built (each a planning and emitting of every kernel)."""
    n = [0]
    real = program.build_device_programs

    def counted(*args, **kwargs):
        n[0] += 1
        return real(*args, **kwargs)
    monkeypatch.setattr(program, "build_device_programs", counted)
    return n


def _run(case, sizes, builds=None):
    """(traces, guards, device programs built by the first call) of `case` compiled with dynamic=True on
    cuda over `sizes`, each call's value and gradients checked against eager (cpu)."""
    f, make = FUNCTIONS[case], CASES[case]
    cf = tg.compile(f, dynamic=True)
    rng = np.random.default_rng(0)
    first = None
    for b in sizes:
        arrays = make(b, rng)
        got, ggot = _value_and_grads(cf, _tensors(arrays, "cuda"))
        want, gwant = _value_and_grads(f, _tensors(arrays, "cpu"))
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-4, err_msg=f"{case} B={b}")
        for a, w in zip(ggot, gwant):
            assert (a is None) == (w is None)
            if a is not None:
                assert a.shape == w.shape
                np.testing.assert_allclose(a, w, rtol=2e-4, atol=1e-4, err_msg=f"{case} B={b} grad")
        if first is None and builds is not None:
            first = builds[0]
    st = cf.stats()
    assert not st["symbolic_failures"]
    return st["traces"], {g for d in st["dynamic"] for g in d["guards"]}, first


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_trace_and_one_build_for_every_size(case, builds):
    traces, guards, first = _run(case, SIZES, builds)
    assert traces == 1
    assert 0 < first == builds[0], "a new size built device programs again"
    cpu = tg.compile(FUNCTIONS[case], dynamic=True)
    for b in SIZES[:2]:
        cpu(*_tensors(CASES[case](b, np.random.default_rng(0)), "cpu"))
    assert guards <= {g for d in cpu.stats()["dynamic"] for g in d["guards"]}


def test_split_reductions_count_their_slices_at_the_call(monkeypatch):
    """A reduction over the symbolic axis split into slices (a second launch joins them): each slice's
    share and the partials' array follow the call's sizes (the planner's thresholds lowered so that
    small sizes split, as tests/cuda_ptx_programs.py does)."""
    from tracegrad.backends.cuda import plan
    monkeypatch.setattr(plan, "MIN_SLICE", 1)
    monkeypatch.setattr(plan, "FILL_BLOCKS", 4)
    traces, _, _ = _run("columns", [70, 3, 0, 129])
    assert traces == 1


def test_kernels_take_the_sizes_as_arguments():
    """The generated kernels read B from an argument, and their grids are counted at the call."""
    cf = tg.compile(lambda x: (x * 3).exp().sum(1), dynamic=True)
    for b in (4, 9):
        x = tg.randn(b, 5, device="cuda")
        np.testing.assert_allclose(cf(x).cpu().numpy(), np.exp(x.cpu().numpy() * 3).sum(1), rtol=1e-5)
    text = cf.ir(x, stage="cuda")
    assert "n_B" in text and "ceil(B/" in text, text


def test_a_failed_symbolic_cuda_compile_compiles_per_size_with_a_warning(monkeypatch):
    """Where planning a kernel with symbolic sizes fails, the signature is compiled per size (a trace
    each), with a RuntimeWarning naming why; results stay right."""
    from tracegrad.backends.cuda import lower
    real = lower.plan

    def refuse(kernel, name):
        if kernel.symbolic():
            raise NotImplementedError("no symbolic plan for this kernel (test)")
        return real(kernel, name)
    monkeypatch.setattr(lower, "plan", refuse)
    cf = tg.compile(lambda x: (x * 2).exp().sum(1), dynamic=True)
    with pytest.warns(RuntimeWarning, match="no symbolic plan for this kernel"):
        cf(tg.randn(4, 3, device="cuda"))
    for b in (2, 5):
        x = tg.randn(b, 3, device="cuda")
        np.testing.assert_allclose(cf(x).cpu().numpy(), np.exp(2 * x.cpu().numpy()).sum(1), rtol=1e-5)
    st = cf.stats()
    assert st["traces"] == 3 and st["symbolic_failures"]
