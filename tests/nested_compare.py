"""assert_same: two nested results (lists and tuples of arrays and plain values) are equal, arrays
within a tolerance; a failure names the path to the first difference."""
import numpy as np


def assert_same(a, b, path="result", rtol=1e-5, atol=1e-6):
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.shape == b.shape, (path, a, b)
        np.testing.assert_allclose(b, a, rtol=rtol, atol=atol, err_msg=path)
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), (path, a, b)
        for i, (p, q) in enumerate(zip(a, b)):
            assert_same(p, q, f"{path}[{i}]", rtol, atol)
    else:
        assert a == b, (path, a, b)
