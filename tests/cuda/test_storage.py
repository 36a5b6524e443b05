"""cuda tensors under numba's simulator: device storage, conversions, factories, printing, the device
errors, and the counted host<->device copies. Values are compared with NumPy (or the cpu tensor)."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tracegrad as tg
from tracegrad.backends.cuda import memory

DTYPES = [tg.float16, tg.float32, tg.float64, tg.int8, tg.int16, tg.int32, tg.int64, tg.uint8, tg.bool]
NP = {tg.float16: np.float16, tg.float32: np.float32, tg.float64: np.float64, tg.int8: np.int8,
      tg.int16: np.int16, tg.int32: np.int32, tg.int64: np.int64, tg.uint8: np.uint8, tg.bool: np.bool_}


def same(a, b):
    """Bit-for-bit equal arrays (NaNs included), same dtype and shape."""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(DTYPES), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4), st.data())
def test_to_cuda_and_back_is_exact(dtype, shape, data):
    arr = data.draw(hnp.arrays(NP[dtype], shape))
    x = tg.from_numpy(arr)
    c = x.to("cuda")
    assert c.device == "cuda:0" and c.is_cuda and c.dtype is dtype and c.shape == x.shape
    assert memory.is_device_array(c._data)
    back = c.cpu()
    assert back.device == "cpu" and same(back.numpy(), arr)
    assert same(x.T.cuda().cpu().numpy(), arr.T)              # a strided source
    assert same(c.T.cpu().numpy(), arr.T)                      # a strided device view, copied out


def test_conversions_copy_one_way_each():
    x = tg.arange(6.0).reshape(2, 3)
    with memory.count_transfers() as n:
        c = x.to("cuda")
        assert n.to_device == 1 and n.bytes == 24
        c2, c3 = x.cuda(), x.to(tg.device("cuda:0"))
        assert c.to("cuda") is c and c.cuda() is c
        assert x.cpu() is x
        assert c.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] and c[1, 2].item() == 5.0
        assert float(c[0, 1]) == 1.0 and int(c[1, 1]) == 4 and bool(c[0, 1])
    assert n.to_device == 3 and n.to_host == 5 and n.count == 8
    c64 = x.to("cuda", tg.float64)
    assert c64.dtype is tg.float64 and c64.device == "cuda" and same(c64.cpu().numpy(), x.numpy().astype(np.float64))
    assert c2.device == c3.device == "cuda:0"
    assert x.to(c64).device == "cuda:0" and x.to(c64).dtype is tg.float64
    assert tg.cuda.memory.transfer_stats()["count"] >= 8


def test_numpy_of_a_cuda_tensor_raises_pytorchs_error():
    c = tg.ones(2, device="cuda")
    msg = ("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host "
           "memory first.")
    with pytest.raises(TypeError) as e:
        c.numpy()
    assert str(e.value) == msg
    with pytest.raises(TypeError, match="Use Tensor.cpu()"):
        np.asarray(c)
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        c.item()


@pytest.mark.parametrize("make, text", [
    (lambda: tg.tensor([1.0, 2.0, 3.0], device="cuda"), "tensor([1., 2., 3.], device='cuda:0')"),
    (lambda: tg.arange(4, device="cuda"), "tensor([0, 1, 2, 3], device='cuda:0')"),
    (lambda: tg.zeros(2, dtype=tg.float64, device="cuda"),
     "tensor([0., 0.], device='cuda:0', dtype=tracegrad.float64)"),
    (lambda: tg.ones(2, device="cuda", requires_grad=True), "tensor([1., 1.], device='cuda:0', requires_grad=True)"),
    (lambda: tg.zeros(0, 3, device="cuda"), "tensor([], device='cuda:0', size=(0, 3))"),
    (lambda: tg.tensor(True, device="cuda"), "tensor(True, device='cuda:0')"),
])
def test_printing_shows_the_device_as_pytorch(make, text):
    assert repr(make()) == text and str(make()) == text


def test_printing_under_a_cuda_default_device_shows_cpu_tensors_device():
    try:
        tg.set_default_device("cuda")
        c = tg.tensor([1.0, 2.0])
        assert c.device == "cuda:0" and repr(c) == "tensor([1., 2.])"
        assert repr(tg.tensor([1.0], device="cpu")) == "tensor([1.], device='cpu')"
    finally:
        tg.set_default_device(None)


FACTORIES = [
    lambda d: tg.zeros(2, 3, device=d), lambda d: tg.ones((2, 3), dtype=tg.int32, device=d),
    lambda d: tg.full((2, 2), 7.5, device=d), lambda d: tg.full((3,), True, device=d),
    lambda d: tg.arange(5, device=d), lambda d: tg.arange(1, 7, 2, device=d),
    lambda d: tg.arange(0.0, 1.0, 0.125, device=d), lambda d: tg.arange(2.5, -1.0, -0.5, dtype=tg.int64, device=d),
    lambda d: tg.eye(3, 4, device=d), lambda d: tg.linspace(0, 1, 5, device=d),
    lambda d: tg.tensor([[1, 2], [3, 4]], device=d), lambda d: tg.empty(2, device=d).shape,
    lambda d: tg.zeros_like(tg.ones(2, 2), device=d), lambda d: tg.ones_like(tg.ones(3, device=d)),
    lambda d: tg.full_like(tg.ones(2, device=d), 3), lambda d: tg.ones(2).new_zeros(3, device=d),
    lambda d: tg.Tensor([1, 2], device=d),
]


@pytest.mark.parametrize("k", range(len(FACTORIES)))
def test_factories_take_device(k):
    want, got = FACTORIES[k]("cpu"), FACTORIES[k]("cuda")
    if isinstance(want, tuple):
        assert want == got
        return
    assert got.device == "cuda:0" and got.dtype is want.dtype and same(got.cpu().numpy(), want.numpy())


def test_factories_fill_on_the_device_without_copies():
    with memory.count_transfers() as n:
        tg.zeros(4, device="cuda"), tg.ones(2, 2, device="cuda"), tg.full((3,), 2.0, device="cuda")
        tg.arange(6, device="cuda"), tg.rand(3, device="cuda"), tg.randn(2, device="cuda")
    assert n.count == 0


def test_random_draws_on_the_device_follow_manual_seed():
    tg.manual_seed(3)
    a, b = tg.rand(40, device="cuda"), tg.randn(40, dtype=tg.float64, device="cuda")
    tg.manual_seed(3)
    a2, b2 = tg.rand(40, device="cuda"), tg.randn(40, dtype=tg.float64, device="cuda")
    assert same(a.cpu().numpy(), a2.cpu().numpy()) and same(b.cpu().numpy(), b2.cpu().numpy())
    assert a.dtype is tg.float32 and b.dtype is tg.float64
    u = a.cpu().numpy()
    assert u.min() >= 0.0 and u.max() < 1.0 and len(set(u.tolist())) == 40
    assert not same(tg.rand(40, device="cuda").cpu().numpy(), u)      # the generator moved on
    tg.cuda.manual_seed_all(3)
    assert same(tg.rand(40, device="cuda").cpu().numpy(), u)
    r = tg.rand(3, 5, device="cuda", requires_grad=True)
    assert r.requires_grad and r.shape == (3, 5)


def test_random_moments():
    tg.manual_seed(0)
    u = tg.rand(500, dtype=tg.float64, device="cuda").cpu().numpy()
    z = tg.randn(500, dtype=tg.float64, device="cuda").cpu().numpy()
    assert abs(u.mean() - 0.5) < 0.05 and abs(u.var() - 1 / 12) < 0.015          # 5+ standard errors
    assert abs(z.mean()) < 0.25 and abs(z.std() - 1) < 0.15


def test_mixed_devices_raise_in_operand_order():
    c, x = tg.ones(3, device="cuda"), tg.ones(3)
    for f, first, second in [(lambda: c + x, "cuda:0", "cpu"), (lambda: x * c, "cpu", "cuda:0"),
                             (lambda: tg.cat([c, x]), "cuda:0", "cpu"), (lambda: x @ c, "cpu", "cuda:0"),
                             (lambda: tg.stack([x, c]), "cpu", "cuda:0")]:
        with pytest.raises(RuntimeError) as e:
            f()
        assert str(e.value) == (f"Expected all tensors to be on the same device, but found at least two devices, "
                                f"{first} and {second}!")


def test_missing_device_kernels_name_the_op_and_the_way_out():
    with pytest.raises(NotImplementedError, match=r"^rand on cuda:0 \(tracegrad.float16\): .*\.cpu\(\)"):
        tg.rand(3, dtype=tg.float16, device="cuda")
    with pytest.raises(NotImplementedError, match=r"^matmul on cuda:0 \(tracegrad.bool\): .*\.cpu\(\)"):
        tg.ones(2, 2, dtype=tg.bool, device="cuda") @ tg.ones(2, 2, dtype=tg.bool, device="cuda")
    from tracegrad.core import Prim
    from tracegrad.backends.cuda import eager
    odd = Prim("frobnicate", "copy", None, None, vjp=None, jvp=None, save=(), save_out=False, lower=None,
               dtypes=(), cost=None)
    with pytest.raises(NotImplementedError, match=r"frobnicate on cuda:0 .*move its operands to the cpu with "):
        eager.run(odd, [], {}, (1,), tg.float32)


def test_module_to_cuda_and_back():
    tg.manual_seed(0)
    m = tg.nn.Sequential(tg.nn.Linear(3, 4), tg.nn.ReLU(), tg.nn.Linear(4, 2))
    before = {k: v.detach().numpy().copy() for k, v in m.named_parameters()}
    params = list(m.parameters())
    assert m.to("cuda") is m
    assert all(p.device == "cuda:0" and p.requires_grad and p.is_leaf for p in m.parameters())
    assert [id(p) for p in m.parameters()] == [id(p) for p in params]       # the same tensor objects
    m.cpu()
    assert all(same(v.detach().numpy(), before[k]) for k, v in m.named_parameters())
    m.cuda()
    assert m[0].weight.device == "cuda:0"
    lin = tg.nn.Linear(2, 3, device="cuda")
    assert lin.weight.device == lin.bias.device == "cuda:0"
    ln = tg.nn.LayerNorm(3, device="cuda")
    assert ln.weight.device == "cuda:0"


def test_device_arrays_become_tensors_without_a_copy():
    from numba import cuda
    d = cuda.to_device(np.arange(6, dtype=np.float32).reshape(2, 3))
    with memory.count_transfers() as n:
        t = tg.as_tensor(d)
        assert t.device == "cuda:0" and t.dtype is tg.float32 and t.shape == (2, 3)
        t2 = tg.tensor(d)
    assert n.count == 0
    d[0, 0] = 9.0
    assert t[0, 0].item() == 9.0 and t2[0, 0].item() == 0.0        # as_tensor shares, tensor copies
    assert tg.as_tensor(t) is t and tg.as_tensor(t, device="cpu").device == "cpu"
    assert tg.tensor(t).device == "cuda:0" and tg.tensor(t, device="cpu").device == "cpu"
    c = tg.ones(2, device="cuda", requires_grad=True)
    assert tg.tensor(c).requires_grad is False


@pytest.mark.filterwarnings("default")
def test_the_tiled_matmul_warns_once():
    from tracegrad.backends.cuda.eager import matmul
    matmul._WARNED.clear()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        a = tg.ones(2, 2, device="cuda")
        a @ a
        a @ a
    assert [str(w.message) for w in rec] == ["tracegrad: matrix products on cuda run a tiled numba.cuda kernel: "
                                             "numba's CUDA simulator has no cuBLAS"]


def test_pickling_keeps_the_device_and_the_interface_is_cuda_only():
    import pickle
    c = tg.tensor([1.5, 2.5], device="cuda")
    d = pickle.loads(pickle.dumps(c))
    assert d.device == "cuda:0" and d.tolist() == [1.5, 2.5]
    assert not hasattr(tg.ones(2), "__cuda_array_interface__")
    with pytest.raises(RuntimeError, match="requires grad"):
        tg.ones(2, device="cuda", requires_grad=True).__cuda_array_interface__
