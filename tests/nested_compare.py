"""assert_same: two nested results (lists and tuples of arrays and plain values) are equal, arrays
within a tolerance; a failure names the path to the first difference."""
import numpy as np


def assert_same(a, b, path="result", rtol=1e-5, atol=1e-6, of_largest=0.0):
    """a == b, nested; arrays to rtol, and to atol or `of_largest` times the array's largest |value|
    (float32 arithmetic: an element that cancels keeps the rounding of its larger neighbours)."""
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.shape == b.shape, (path, a, b)
        big = float(np.nanmax(np.abs(a), initial=0.0, where=np.isfinite(a))) if a.dtype.kind == "f" and a.size else 0.0
        np.testing.assert_allclose(b, a, rtol=rtol, atol=max(atol, of_largest * big), err_msg=path)
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), (path, a, b)
        for i, (p, q) in enumerate(zip(a, b)):
            assert_same(p, q, f"{path}[{i}]", rtol, atol, of_largest)
    else:
        assert a == b, (path, a, b)
