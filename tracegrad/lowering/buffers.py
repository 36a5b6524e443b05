"""Which intermediate buffers of a program share memory.

A program keeps its intermediates (values neither inputs nor outputs) in buffers allocated once and
reused by every call. Two intermediates share a block of memory when their lives do not overlap:
a value lives from the step that writes it to the last step that reads it, and a block is free for
a new value only once the step that last read it has run, never during it (a kernel may read one
element while writing another). Blocks are assigned greedily in step order, each value taking the
free block closest to its size (grown if too small), so the program holds roughly the largest set
of intermediates alive at once instead of all of them. Kernels that run at once (the members of a
shared parallel region, regions.py) are one step. Symbolic sizes (sizes.py): which values share a block
is decided on their hints (lives do not depend on sizes); a block's bytes are the most its users need
at the call (`carve`, per call with new sizes)."""
import math

import numpy as np

from ..symint import hint, substitute


def plan(kernels, temps, steps=None, env=None):
    """{slot: array} for `temps`, a list of (slot, Value) intermediates written by `kernels` (in run
    order; steps[j]: kernel j's step, default j); arrays of slots whose lives do not overlap are
    views of one block. env: the symbols' values (symbolic shapes)."""
    out = {}
    for _, users in blocks(kernels, temps, steps):
        out.update(carve(users, env)[1])
    return out


def carve(users, env=None, raw=None):
    """(block, {slot: array}): the [(slot, Value)] users of one block as views of `raw` (bytes), or of a
    new block where raw is None or too small, their shapes under the symbols' values `env`."""
    shapes = [(slot, substitute(v.shape, env or {}), v.dtype) for slot, v in users]
    need = max((math.prod(shape) * dt.itemsize for _, shape, dt in shapes), default=0)
    if raw is None or raw.size < need:
        raw = np.empty(need, np.uint8)
    return raw, {slot: raw[:math.prod(shape) * dt.itemsize].view(dt.np).reshape(shape) for slot, shape, dt in shapes}


def blocks(kernels, temps, steps=None):
    """[(bytes, [(slot, Value)])]: the blocks of memory `temps` share (any device allocates them)."""
    written, last_read = {}, {}
    for i, k in enumerate(kernels):
        j = i if steps is None else steps[i]
        for v in k.outputs:
            written.setdefault(id(v), j)
        for ld in k.reads:
            last_read[id(ld.buf)] = j
    found = []                      # [bytes, free from this step on, [(slot, value)]]
    for slot, v in sorted(temps, key=lambda sv: (written.get(id(sv[1]), -1), sv[0])):
        start = written.get(id(v), -1)
        need = math.prod(map(hint, v.shape)) * v.dtype.itemsize
        free = [b for b in found if b[1] <= start]
        fits = [b for b in free if b[0] >= need]
        block = min(fits, key=lambda b: b[0]) if fits else max(free, key=lambda b: b[0], default=None)
        if block is None:
            block = [need, 0, []]
            found.append(block)
        block[0] = max(block[0], need)
        block[1] = max(start, last_read.get(id(v), start)) + 1
        block[2].append((slot, v))
    return [(size, users) for size, _, users in found]
