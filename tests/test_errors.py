"""Bad input gets a Python exception of the right type whose message names the problem; nothing crashes."""
import numpy as np
import pytest

import tracegrad as tg

T = lambda: tg.ones(2, 3)  # noqa: E731


@pytest.mark.parametrize("data, exc, words", [
    ("abc", TypeError, "str"),
    (b"abc", TypeError, "bytes"),
    (None, TypeError, "NoneType"),
    ({"a": 1}, TypeError, "dict"),
    ([1, None], TypeError, "tg.tensor()"),
    ([[1, 2], [3, "a"]], TypeError, "tg.tensor()"),
    ([[1, 2], [3]], ValueError, "ragged"),
    ([[1.0], [2.0, 3.0]], ValueError, "ragged"),
    ([1j], TypeError, "complex"),
])
def test_tensor_rejects_bad_data(data, exc, words):
    with pytest.raises(exc, match=words.replace("(", r"\(").replace(")", r"\)")):
        tg.tensor(data)


@pytest.mark.parametrize("make", [tg.zeros, tg.ones, tg.empty, tg.randn, tg.rand])
def test_negative_sizes(make):
    with pytest.raises(ValueError, match="negative dimension -1"):
        make(3, -1)
    with pytest.raises(TypeError, match="size must be a sequence of ints"):
        make(2.5)
    with pytest.raises(TypeError, match="size"):
        make("3")
    with pytest.raises(TypeError, match="size"):
        make(None)


@pytest.mark.parametrize("make", [lambda: tg.zeros(10 ** 12, 10 ** 12), lambda: tg.ones(2 ** 62, 4),
                                  lambda: tg.full((10 ** 10, 10 ** 10), 1.0), lambda: tg.randn(10 ** 12, 10 ** 12),
                                  lambda: tg.eye(10 ** 10)])
def test_huge_sizes_raise_instead_of_crashing(make):
    with pytest.raises((ValueError, MemoryError, RuntimeError), match="(?i)too big|cannot allocate|size"):
        make()


def test_other_factory_errors():
    with pytest.raises(ValueError, match="negative dimension"):
        tg.full((-2,), 1.0)
    with pytest.raises(TypeError, match="fill_value"):
        tg.full((2,), "x")
    with pytest.raises(ValueError, match="step"):
        tg.arange(0, 5, 0)
    with pytest.raises(TypeError, match="arange"):
        tg.arange("a")
    with pytest.raises(TypeError, match="np.ndarray"):
        tg.from_numpy([1, 2])
    with pytest.raises(TypeError, match="not supported"):
        tg.from_numpy(np.array(["a"]))
    with pytest.raises(TypeError, match="dtype"):
        tg.tensor([1.0], dtype=3)
    with pytest.raises(ValueError, match="unknown dtype 'foo'"):
        tg.tensor([1.0], dtype="foo")
    with pytest.raises(RuntimeError, match="gpu"):
        tg.tensor([1.0], device="gpu")
    with pytest.raises(RuntimeError, match="floating point"):
        tg.zeros(3, dtype=tg.int64, requires_grad=True)


@pytest.mark.parametrize("f", [
    lambda t: t.sum(axis=2), lambda t: t.mean(dim=-3), lambda t: t.max(axis=3), lambda t: t.var(axis=2),
    lambda t: t.logsumexp(axis=2), lambda t: t.softmax(dim=3), lambda t: t.argmax(7), lambda t: t.squeeze(2),
    lambda t: t.unsqueeze(5), lambda t: t.transpose(0, 3), lambda t: t.flatten(0, 5), lambda t: t.size(5),
    lambda t: t.stride(5), lambda t: tg.cat([t, t], axis=2), lambda t: tg.stack([t, t], axis=4),
])
def test_axis_out_of_range_is_index_error(f):
    with pytest.raises(IndexError, match="Dimension out of range"):
        f(T())


@pytest.mark.parametrize("f, exc, words", [
    (lambda t: t[5], IndexError, "index 5 is out of bounds for dimension 0 with size 2"),
    (lambda t: t[-3], IndexError, "out of bounds"),
    (lambda t: t[0, 0, 0], IndexError, "too many indices"),
    (lambda t: t[1.5], IndexError, "float"),
    (lambda t: t["a"], IndexError, "str"),
    (lambda t: t[tg.tensor([0, 7])], IndexError, "index 7 is out of bounds"),
    (lambda t: t[tg.tensor([0.5])], IndexError, "long, int or bool"),
    (lambda t: t[..., ...], IndexError, "ellipsis"),
])
def test_bad_indices(f, exc, words):
    with pytest.raises(exc, match=words):
        f(T())


@pytest.mark.parametrize("f", [lambda: tg.ones(2, 3).item(), lambda: float(tg.ones(2)), lambda: int(tg.ones(3)),
                               lambda: bool(tg.ones(2)), lambda: tg.zeros(0).item()])
def test_scalar_conversion_of_many_elements_is_runtime_error(f):
    with pytest.raises(RuntimeError, match="elements cannot be converted to Scalar|ambiguous"):
        f()


@pytest.mark.parametrize("other", ["a", None, [1, 2, 3], {}, object()])
def test_arithmetic_with_non_numbers_is_type_error(other):
    for op in (lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a - b, lambda a, b: a / b,
               lambda a, b: a ** b, lambda a, b: a < b):
        with pytest.raises(TypeError, match=type(other).__name__):
            op(T(), other)


def test_shape_errors():
    t = T()
    with pytest.raises(RuntimeError, match=r"shape '\[4\]' is invalid for input of size 6"):
        t.reshape(4)
    with pytest.raises(RuntimeError, match="invalid shape dimension -2"):
        t.reshape(-2, 3)
    with pytest.raises(RuntimeError, match="only one dimension can be inferred"):
        t.view(-1, -1)
    with pytest.raises(RuntimeError, match="expanded size"):
        t.expand(4, 3)
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        t @ tg.ones(2, 3)
    with pytest.raises(RuntimeError, match="at least 1D"):
        t @ tg.tensor(1.0)
    with pytest.raises(TypeError, match="str"):
        t @ "a"
    with pytest.raises(RuntimeError, match="same shape except in dimension 0"):
        tg.cat([t, tg.ones(2, 4)])
    with pytest.raises(RuntimeError, match="equal size"):
        tg.stack([t, tg.ones(3)])
    with pytest.raises(RuntimeError, match="permut|dimensions"):
        t.permute(0)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        t[0] = tg.ones(4)
    with pytest.raises(tg.BroadcastError, match=r"\(2, 3\) and \(4,\)"):
        t + tg.ones(4)


def test_bad_axis_and_dim_types_are_type_errors():
    t = T()
    with pytest.raises(TypeError, match="axis"):
        t.sum(axis="a")
    with pytest.raises(TypeError, match="axis"):
        t.sum(axis=1.0)
    with pytest.raises(TypeError, match="int"):
        t.transpose("a", 0)


def test_setitem_with_bad_values():
    t = T()
    with pytest.raises(TypeError, match="str"):
        t[0] = "a"
    with pytest.raises(TypeError, match="NoneType"):
        t[0] = None
    assert t.tolist() == [[1.0] * 3] * 2  # untouched


def test_autograd_misuse():
    x = tg.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        x.sum().backward(tg.ones(3))
    with pytest.raises(RuntimeError, match="different size"):
        x.grad = tg.ones(3)
    with pytest.raises(TypeError, match="str"):
        x.grad = "x"
    with pytest.raises(TypeError, match="0-d"):
        len(tg.tensor(1.0))
    with pytest.raises(TypeError, match="0-d"):
        list(tg.tensor(1.0))
    with pytest.raises(RuntimeError, match="leaf"):
        (x * 2).requires_grad_(False)


def test_nn_and_optim_misuse():
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        tg.nn.Linear(3, 2)(tg.ones(2, 4))
    with pytest.raises(ValueError, match="-1"):
        tg.nn.Linear(-1, 2)
    with pytest.raises(ValueError, match="lr"):
        tg.optim.SGD([tg.ones(1, requires_grad=True)], lr=-1)
    with pytest.raises(TypeError, match="require grad"):
        tg.optim.SGD([1.0], lr=1)
    with pytest.raises(ValueError, match="Adam"):
        tg.optim.Adam([tg.ones(1, requires_grad=True)], betas=(1.5, 0.9))
    with pytest.raises(TypeError, match="Module"):
        tg.nn.Sequential(tg.nn.ReLU(), 3)


def test_device_misuse():
    with pytest.raises(RuntimeError, match="cuda:x"):
        tg.device("cuda:x")
    with pytest.raises(TypeError, match="int"):
        tg.tensor([1.0], device=0)
    with pytest.raises(RuntimeError, match="gpu"):
        T().to("gpu")


def test_value_errors_are_runtime_errors_too_as_in_pytorch():
    import tracegrad.nn.functional as F
    with pytest.raises(RuntimeError, match="negative dimension"):
        tg.zeros(-1)
    with pytest.raises(RuntimeError, match="appears multiple times"):
        tg.ones(2, 3).sum((1, 1))
    with pytest.raises(RuntimeError, match="approximate"):
        F.gelu(tg.ones(2), approximate="fast")
