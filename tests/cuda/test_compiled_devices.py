"""Which device a compiled call runs on, and the errors of backend="cuda": the inputs' device picks
the backend, mixing devices is the SPEC's error, the device is part of the signature and of the
guards, and an op the GPU cannot run is refused at compile time (no silent host fallback)."""
import numpy as np
import pytest

import tracegrad as tg

A = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
MIXED = "Expected all tensors to be on the same device, but found at least two devices, {} and {}!"


def test_cuda_inputs_pick_the_cuda_backend_cpu_inputs_llvm():
    f = tg.compile(lambda x: x * 2.0)
    assert f(tg.tensor(A, device="cuda")).device == "cuda:0"
    assert "define" in f.ir(tg.tensor(A), stage="llvm")
    assert "def forward_k0(" in f.ir(tg.tensor(A, device="cuda"), stage="cuda")
    assert f.stats()["traces"] == 2


def test_the_device_is_part_of_the_signature():
    f = tg.compile(lambda x: x + 1.0)
    f(tg.tensor(A))
    f(tg.tensor(A, device="cuda"))
    assert f.stats()["traces"] == 2
    assert "x: device cpu -> cuda:0" in f.stats()["retrace_reasons"]


def test_a_captured_tensor_moved_to_the_device_retraces():
    model = tg.nn.Linear(3, 2)
    g = tg.compile(lambda x: model(x))
    g(tg.tensor(A))
    model.to("cuda")
    out = g(tg.tensor(A, device="cuda"))
    assert out.device == "cuda:0" and g.stats()["traces"] == 2
    np.testing.assert_allclose(out.detach().cpu().numpy(), A @ model.weight.detach().cpu().numpy().T
                               + model.bias.detach().cpu().numpy(), rtol=1e-5)


@pytest.mark.parametrize("order", ["cuda first", "cpu first"])
def test_inputs_on_two_devices_raise_the_device_error(order):
    a, b = tg.tensor(A, device="cuda"), tg.tensor(A)
    first, second = (a, b) if order == "cuda first" else (b, a)
    f = tg.compile(lambda x, y: (x * 2.0, y * 2.0))       # never meet in one op: still refused
    with pytest.raises(RuntimeError) as e:
        f(first, second)
    assert str(e.value) == MIXED.format(first.device, second.device)


def test_python_numbers_and_0d_cpu_tensors_go_with_cuda_inputs():
    f = tg.compile(lambda x, s, c: x * s + c)
    out = f(tg.tensor(A, device="cuda"), 3.0, tg.tensor(0.5))
    assert out.device == "cuda:0"
    np.testing.assert_allclose(out.cpu().numpy(), A * 3.0 + 0.5, rtol=1e-6)


def test_backend_and_device_must_agree():
    with pytest.raises(RuntimeError, match=r"backend='llvm' runs on the cpu, but its inputs are on cuda:0; use "
                                           r"backend='cuda'"):
        tg.compile(lambda x: x + 1.0, backend="llvm")(tg.tensor(A, device="cuda"))
    with pytest.raises(RuntimeError, match=r"backend='cuda' runs on cuda tensors, but its inputs are on cpu; move "
                                           r"them with \.cuda\(\)"):
        tg.compile(lambda x: x + 1.0, backend="cuda")(tg.tensor(A))


def test_interpret_backend_on_cuda_tensors_returns_cuda_tensors():
    out = tg.compile(lambda x: (x * x).sum(0), backend="interpret")(tg.tensor(A, device="cuda"))
    assert out.device == "cuda:0"
    np.testing.assert_allclose(out.cpu().numpy(), (A * A).sum(0), rtol=1e-6)


def test_an_op_without_a_cuda_implementation_is_refused_at_compile_time(monkeypatch):
    """tracegrad.cuda says it has no kernel for cumsum (whether it has one or not): the compiled
    function refuses at compile time, naming the op, its operands and the device; nothing runs."""
    from tracegrad.backends.cuda import eager
    real = eager.run

    def run(p, arrays, attrs, shape, dtype):
        if p.name == "cumsum":
            raise NotImplementedError("cumsum on cuda:0: no device kernel; move it to the cpu")
        return real(p, arrays, attrs, shape, dtype)
    monkeypatch.setattr(eager, "run", run)
    f = tg.compile(lambda x: (x * 2.0).cumsum(1))
    x = tg.tensor(A, device="cuda")
    with pytest.raises(NotImplementedError, match=r"op 'cumsum' \(f32\[2,3\]\) has no CUDA implementation on "
                                                  r"cuda:0 \(cumsum on cuda:0: no device kernel\)"):
        f(x)
    with pytest.raises(NotImplementedError, match="cumsum"):
        f.ir(x, stage="cuda")
    assert f.stats()["traces"] == 0
