"""writeback.separate: each .grad written by a compiled call gets its own memory; arrays of two
NumPy owners are never compared, views of one owner (or of memory NumPy does not own) are."""
import numpy as np

from tracegrad.jit.writeback import Seen, separate


def test_separate_copies_exactly_the_arrays_that_overlap_one_seen():
    block, other = np.arange(24.0), np.zeros(6)
    raw = np.frombuffer(bytearray(48), np.float64)             # memory NumPy does not own
    seen = Seen()
    a = separate(block[:12].reshape(3, 4), seen)
    b = separate(block[12:], seen)                              # the same owner, disjoint: kept
    c = separate(block[10:14], seen)                            # overlaps both: copied
    d = separate(other, seen)
    e = separate(other[2:], seen)                               # a view of d's memory: copied
    f = separate(raw, seen)
    g = separate(raw[1:3], seen)                                # unknown owner, overlapping: copied
    assert a.base is block and b.base is block and d is other and f is raw
    for copy, source in ((c, block[10:14]), (e, other[2:]), (g, raw[1:3])):
        assert not np.shares_memory(copy, source) and np.array_equal(copy, source)
    arrays = [a, b, c, d, e, f, g]
    assert not any(np.shares_memory(x, y) for i, x in enumerate(arrays) for y in arrays[i + 1:])
