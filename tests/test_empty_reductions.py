"""Reductions over empty tensors (an empty reduced axis, or empty kept axes), eager and compiled:
values as NumPy's (a sum of nothing is 0, a product 1) and gradients of the input's (empty) shape,
also for the product's second derivative. The fuzzer found eager prod's backward raising a raw
NumPy reshape error on an empty axis."""
import itertools

import numpy as np
import pytest

import tracegrad as tg

SHAPES_AXES = [((0,), -1), ((3, 0), -1), ((3, 0), 0), ((0, 4), -1), ((0, 4), 0), ((2, 0, 3), (0, 2)),
               ((2, 0, 3), 1), ((2, 0, 3), None)]
REDUCTIONS = {"sum": (lambda x, ax: x.sum(ax) if ax is not None else x.sum(), np.sum),
              "prod": (lambda x, ax: x.prod(ax) if ax is not None else x.prod(), np.prod)}


def _run(fn, shape, backend):
    x = tg.tensor(np.zeros(shape), requires_grad=True)
    f = fn if backend is None else tg.compile(fn, backend=backend)
    y = f(x)
    y.sum().backward()
    return y.detach().numpy(), x.grad


@pytest.mark.parametrize("name,shape_axis,backend",
                         list(itertools.product(REDUCTIONS, SHAPES_AXES, [None, "interpret", "llvm"])))
def test_reductions_of_empty_tensors(name, shape_axis, backend):
    shape, axis = shape_axis
    op, np_op = REDUCTIONS[name]
    value, grad = _run(lambda x: op(x * 1.0, axis), shape, backend)
    np.testing.assert_array_equal(value, np_op(np.zeros(shape), axis=axis))
    assert grad is not None and grad.shape == shape


@pytest.mark.parametrize("shape,axis", SHAPES_AXES[:-1])
def test_prod_second_derivative_of_empty_tensors(shape, axis):
    x = tg.tensor(np.zeros(shape), requires_grad=True)
    (g,) = tg.autograd.grad(x.prod(axis).sum(), [x], create_graph=True)
    g.sum().backward()
    assert g.shape == shape and x.grad.shape == shape
