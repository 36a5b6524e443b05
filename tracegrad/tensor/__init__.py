"""Tensors: the Tensor class and the functions that make and combine tensors.

base.py          what a tensor holds (storage, shape, dtype, autograd state); conversions to Python
dispatch.py      how an op reaches the primitive table: dispatch, dtype promotion, argument conventions
tensor_class.py  the Tensor class: every method a thin call (add new methods there)
named_methods.py the everyday names Tensor inherits: ceil, sort, topk, cross, uniform_, in-place *_ forms, ...
typed.py         tg.LongTensor, tg.FloatTensor, ... and x.type()
functions.py     ops over several tensors: matmul, where, cat, stack
indexing.py      x[index] and x[index] = value
inplace.py       in-place writes (add_, mul_, fill_, copy_, ...) and version counters
direct.py        in-place updates of CPU tensors written straight into their memory (NumPy's out=)
factories.py     tensor, from_numpy, zeros, ones, full, arange, eye, rand, randn, ...
"""
from .base import TraceError, _ArgError  # noqa: F401
from .dispatch import _named, _operands, _promote, dispatch  # noqa: F401
from .factories import (_rebuild, _rng, arange, as_tensor, empty, empty_like, eye, from_numpy, full,  # noqa: F401
                        full_like, linspace, manual_seed, ones, ones_like, rand, rand_like, randint, randn,
                        randn_like, randperm, tensor, zeros, zeros_like)
from .functions import cat, matmul, stack, where  # noqa: F401
from .tensor_class import Tensor  # noqa: F401
