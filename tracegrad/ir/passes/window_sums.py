"""The scatter-add of sliding windows (`unwindows`, ops/windows.py: a convolution's input gradient,
col2im) as one expression over its result's space, a part of fusion (ir/passes/fusion.py).

Element p of the result sums, over the window offsets o, the windows' element (q, o) where q =
(p - o * dilation) / step lands on a window (an integer in [0, count) on every window axis), else 0:
a sum of prod(size) gathers at clamped coordinates, each coordinate and its test built once per
axis and offset and shared. So the gradient of a convolution's input is a fused loop reading the
product's result where it is, not a host kernel adding strided slices (W10's backward: two host
kernels, 23 ms of its 135 ms of kernel time on the loaded bench machine, before).
More than MAX_OFFSETS offsets (a 7x7 kernel) stays a host kernel: each element would sum them all.
More than RECOMPUTE_OFFSETS offsets (a 5x5 kernel) is written once: a consumer reading it broadcast
(a 2x2 max pool's gradient reads each element 4 times) would redo every gather per read (W9's
LeNet: 2.8 ms fused, 1.0 + 0.2 written, one thread). So is a sum of windows of step 1 (a stride-1
convolution's): its tests and clamps are the box tests of ir/boxes.py, so written alone its kernel
runs box by box, each offset a load at an affine index, no gathers (W10's 3x3 convolution of 32
channels 16x16, its input gradient read by the 2x2 pool's: 1.8 ms fused, 0.8 + 0.3 written; one
thread, minimum of 30). Other sums of a few offsets (a strided 3x3 convolution's) are recomputed:
their gathers, written and read back, were slower (W10 before boxes: 1.7 ms fused, 2.2 + 1.0)."""
import math

import numpy as np

from ... import dtypes as D
from ...ops import PRIMS
from ..kernels import Const, Iota, gathered, size
from .copies import CHEAP_PIECE_OPS, _along, _op
from .gathers import through

MAX_OFFSETS = 27
RECOMPUTE_OFFSETS = 9


def written_once(n):
    """Whether unwindows node n is written to a buffer rather than recomputed by its consumers."""
    count = math.prod(n.attrs["size"])
    return count > RECOMPUTE_OFFSETS or count > 1 and all(s == 1 for s in n.attrs["step"])


def window_sum_tree(n, tree, buffer_load):
    """The expression of unwindows node n given its input's expression `tree`; None: a host kernel."""
    shape, dtype, a = tuple(n.out.shape), n.out.dtype, n.attrs
    axes, sizes = tuple(a["axes"]), tuple(a["size"])
    if 0 in shape or dtype.name not in PRIMS["where"].dtypes or math.prod(sizes) > MAX_OFFSETS:
        return None
    g, ndim = n.inputs[0], len(shape)
    if gathered(tree) or size(tree) > CHEAP_PIECE_OPS:
        tree = buffer_load(g)
    unit = [tuple(int(k == d) for k in range(ndim)) for d in range(ndim)]
    along = {ax: [_along(Iota(unit[ax], 0, D.int64), o * dl, s, g.shape[ax]) for o in range(k)]
             for ax, k, s, dl in zip(axes, sizes, a["step"], a["dilation"])}
    total = None
    for offs in np.ndindex(*sizes):
        coords = {d: (unit[d], 0, None) for d in range(ndim)}
        inside = None
        for j, (ax, o) in enumerate(zip(axes, offs)):
            q, test = along[ax][o]
            coords[ax] = (None, 0, q)
            coords[ndim + j] = ((0,) * ndim, o, None)
            inside = test if inside is None else _op("logical_and", [inside, test], D.bool_)
        term = _op("where", [inside, through(tree, coords, ndim), Const(0, dtype)], dtype)
        total = term if total is None else _op("add", [total, term], dtype)
    return total
