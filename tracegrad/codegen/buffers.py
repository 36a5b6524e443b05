"""Which intermediate buffers of a program share memory.

A program keeps its intermediates (values neither inputs nor outputs) in buffers allocated once and
reused by every call. Two intermediates share a block of memory when their lives do not overlap:
a value lives from the step that writes it to the last step that reads it, and a block is free for
a new value only once the step that last read it has run, never during it (a kernel may read one
element while writing another). Blocks are assigned greedily in step order, each value taking the
free block closest to its size (grown if too small), so the program holds roughly the largest set
of intermediates alive at once instead of all of them. Kernels that run at once (the members of a
shared parallel region, regions.py) are one step."""
import math

import numpy as np


def plan(kernels, temps, steps=None):
    """{slot: array} for `temps`, a list of (slot, Value) intermediates written by `kernels` (in run
    order; steps[j]: kernel j's step, default j); arrays of slots whose lives do not overlap are
    views of one block."""
    out = {}
    for size, users in blocks(kernels, temps, steps):
        raw = np.empty(size, np.uint8)
        for slot, v in users:
            n = math.prod(v.shape)
            out[slot] = raw[:n * v.dtype.itemsize].view(v.dtype.np).reshape(v.shape)
    return out


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
        need = math.prod(v.shape) * v.dtype.itemsize
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
