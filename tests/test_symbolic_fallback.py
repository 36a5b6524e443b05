"""A symbolic compile that fails never breaks a program that compiles for its sizes: the signature is
compiled per size (as dynamic=False), with a RuntimeWarning and stats()["symbolic_failures"] naming
why; where the program itself is at fault, the error is the one a static compile raises."""
import numpy as np
import pytest

import tracegrad as tg
from tracegrad.jit import dynamic


def _step(x, w):
    return ((x @ w).tanh() * 2.0 + 1.0).sum()


def _broken(monkeypatch):
    def fail(self, leaves):
        raise KeyError("symbol B is not bound")          # an internal failure of the symbolic pipeline
    monkeypatch.setattr(dynamic.SymbolicEntry, "program_for", fail)


@pytest.mark.parametrize("mode", [None, True])
def test_failed_symbolic_compile_falls_back_to_sizes(monkeypatch, mode):
    _broken(monkeypatch)
    f = tg.compile(_step, dynamic=mode)
    w = tg.tensor(np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3))
    rows = [5, 9, 1, 0, 9, 7]
    with pytest.warns(RuntimeWarning, match="symbolic sizes failed .*KeyError"):
        for n in rows:
            x = np.linspace(-2, 2, n * 8, dtype=np.float32).reshape(n, 8)
            want = (np.tanh(x @ w.numpy()) * 2.0 + 1.0).sum()
            np.testing.assert_allclose(f(tg.tensor(x), w).item(), want, rtol=1e-5, atol=1e-5)
    s = f.stats()
    assert s["symbolic_failures"] == ["KeyError: 'symbol B is not bound'"]
    assert s["traces"] == len(set(rows)) and s["size_programs"] == 0     # per size, and never symbolic again


def test_a_users_error_is_the_static_compiles(monkeypatch):
    _broken(monkeypatch)
    f = tg.compile(lambda x, y: x + y, dynamic=True)
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(5, 4\)|\[3, 4\].*\[5, 4\]"), pytest.warns(RuntimeWarning):
        f(tg.ones(3, 4), tg.ones(5, 4))
