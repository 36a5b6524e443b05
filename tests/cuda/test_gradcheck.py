"""tg.gradcheck on cuda tensors (simulator): f runs on the device, on float64 copies of float32 /
float16 inputs; analytic gradients are compared with central differences; a wrong gradient is
caught and named; inputs that do not require grad stay fixed (and on their device); the inputs
themselves are left untouched."""
import numpy as np
import pytest

import tracegrad as tg

CASES = [       # (f, the inputs' dtype): few elements each (every evaluation launches kernels in Python)
    (lambda a, b: (a * b).tanh(), tg.float32),
    (lambda a, b: (a * b).tanh(), tg.float64),
    (lambda a, b: (a @ b.mT).exp().sum(1), tg.float32),
    (lambda a, b: a.prod(1) + b.cumsum(1).sum(1), tg.float64),
    (lambda a, b: (a.softmax(1) * b).sum(), tg.float32),
    (lambda a, b: tg.where(a > 0, a.sigmoid(), b * a), tg.float64),
]


@pytest.mark.parametrize("f,dtype", CASES)
def test_gradcheck_passes_on_cuda(f, dtype):
    rng = np.random.default_rng(4)
    seen = []

    def g(a, b):
        seen.append((a.device, a.dtype, b.device))
        return f(a, b)
    a = tg.tensor(rng.standard_normal((2, 2)), dtype=dtype, device="cuda", requires_grad=True)
    b = tg.tensor(rng.standard_normal((2, 2)) + 0.5, dtype=dtype, device="cuda", requires_grad=True)
    before = a.detach().cpu().numpy().copy()
    assert tg.gradcheck(g, (a, b))
    assert seen and all(s == ("cuda:0", tg.float64, "cuda:0") for s in seen)
    np.testing.assert_array_equal(a.detach().cpu().numpy(), before)
    assert a.dtype is dtype and a.grad is None and a.device == "cuda:0"


def test_float16_inputs_are_checked_in_float64():
    x = tg.tensor([0.5, -1.0, 2.0], dtype=tg.float16, device="cuda", requires_grad=True)
    assert tg.gradcheck(lambda a: (a * a).exp(), (x,))


def test_catches_a_wrong_gradient_on_cuda():
    x = tg.tensor([1.0, 2.0, -0.5], device="cuda", requires_grad=True)

    def f(a):  # forward a*a, backward of a*detach(a): gradient a instead of 2a
        return a * a.detach()
    with pytest.raises(tg.GradcheckError) as e:
        tg.gradcheck(f, (x,))
    assert "input 0" in str(e.value) and "analytic" in str(e.value) and "numerical" in str(e.value)


def test_inputs_not_requiring_grad_stay_fixed_on_the_device():
    calls = []

    def f(a, b):
        calls.append(b.device)
        return a * b
    a = tg.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    assert tg.gradcheck(f, (a, tg.tensor([3.0, 4.0], device="cuda")))
    assert len(calls) == 1 + 2 * 2 and all(d == "cuda:0" for d in calls)
