"""TRACEGRAD_LOG=stages,recompiles,kernels: the compiler's stages with their times, retraces with
their reasons and the kernels built, on stderr; nothing at all when unset or on a cached call."""
import re

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import logs

rng = np.random.default_rng(0)
LINE = re.compile(r"^\[tracegrad\.(\w+)\] ([^:]+): (.*)$")


def _lines(err, name=None):
    """[(function, text)] of the log lines on stderr under `name` (all names: (name, function, text))."""
    got = [m.groups() for m in map(LINE.match, err.splitlines()) if m]
    return got if name is None else [(fn, text) for n, fn, text in got if n == name]


def _t(*shape, grad=False):
    return tg.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=grad)


def _ms(text):
    return float(re.search(r"([\d.]+) ms", text).group(1))


def test_stages_in_pipeline_order_with_times_and_nothing_per_call(monkeypatch, capsys):
    monkeypatch.setenv("TRACEGRAD_LOG", "stages")

    def loss(x, w):
        return (x @ w).tanh().sum()
    f = tg.compile(loss)
    x, w = _t(32, 40), _t(40, 24, grad=True)
    f(x, w).backward()
    lines = _lines(capsys.readouterr().err, "stages")
    assert {fn for fn, _ in lines} == {"loss"}
    stages = [text.split(" ")[0] for _, text in lines[:-1]]
    assert stages == ["trace", "autodiff", "optimize", "remat", "protect", "fuse", "schedule", "emit", "LLVM",
                      "finish"]
    total = lines[-1][1]
    assert total.startswith("compile: ") and total.endswith(" in all")
    assert sum(_ms(t) for _, t in lines[:-1]) <= _ms(total) + 0.05 * len(lines)   # each rounded to 0.01 ms
    f(x, w).backward()                       # w.grad is set now: a retrace (the signature says so)
    capsys.readouterr()
    for _ in range(3):                       # cached calls log nothing
        f(x, w).backward()
    assert capsys.readouterr().err == ""


def test_a_disk_cache_hit_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRACEGRAD_LOG", "stages")
    x = _t(8, 9)
    tg.compile(lambda x: x * 7.5 - 1)(x)
    first = [t for _, t in _lines(capsys.readouterr().err, "stages") if t.startswith("LLVM")]
    tg.compile(lambda x: x * 7.5 - 1)(x)          # the same IR: its object code is on disk
    second = [t for _, t in _lines(capsys.readouterr().err, "stages") if t.startswith("LLVM")]
    assert first[0].endswith("(optimized and compiled)") and second[0].endswith("(object code from the disk cache)")


def test_interpret_backend_logs_its_stages_without_llvm(monkeypatch, capsys):
    monkeypatch.setenv("TRACEGRAD_LOG", "all")
    tg.compile(lambda x: x.exp(), backend="interpret")(_t(3))
    err = capsys.readouterr().err
    stages = [t.split(" ")[0] for _, t in _lines(err, "stages")]
    assert stages == ["trace", "autodiff", "optimize", "protect", "finish", "compile:"]
    assert _lines(err, "kernels") == []


def test_recompiles_name_each_retrace_and_its_reason(monkeypatch, capsys):
    monkeypatch.setenv("TRACEGRAD_LOG", "recompiles")

    class Scale(tg.nn.Module):
        def __init__(self):
            super().__init__()
            self.k = 2.0

        def forward(self, x):
            return x * self.k
    m = Scale()
    f = tg.compile(m)
    f(_t(3, 4))
    f(_t(3, 4))
    assert capsys.readouterr().err == ""                   # a first trace and a hit: no retrace
    f(_t(5, 4))                                            # the signature changed
    m.k = 3.0                                              # a guarded attribute changed
    f(_t(5, 4))
    lines = _lines(capsys.readouterr().err, "recompiles")
    reasons = f.stats()["retrace_reasons"]
    assert len(lines) == 2 and len(reasons) == 2
    for (fn, text), n, reason in zip(lines, (2, 3), reasons):
        assert fn == "Scale" and text == f"retrace (trace {n}): {reason}"
    assert "x: dim 0 became symbolic B (3 -> 5)" in lines[0][1] and "k" in lines[1][1]


def _kernel_lines(capsys, fn, *args):
    f = tg.compile(fn)
    f(*args)
    return f, [t for _, t in _lines(capsys.readouterr().err, "kernels")]


@pytest.mark.parametrize("fn, shapes, kind, ops, how", [
    (lambda x: (x * 2.0).tanh(), [(64, 64)], "loop", "mul+tanh", "map in memory order"),
    (lambda x: tg.softmax(x, -1), [(64, 300)], "loop", "max+sub+exp+sum", "row reductions in memory order"),
    (lambda x: x.sum(0), [(300, 64)], "reduce_acc", "sum", "column accumulation"),
    (lambda x: tg.softmax(x, 0), [(300, 64)], "reduce_acc", "max+sub+exp+sum", "online column walk"),
    (lambda x, y: x.T * 2.0 + y, [(64, 96), (96, 64)], "loop", "mul+add", "map"),
    (lambda x, y: x @ y, [(16, 24), (24, 8)], "extern", "matmul", "BLAS sgemm 16x8x24"),
])
def test_kernels_say_kind_ops_and_lowering(fn, shapes, kind, ops, how, monkeypatch, capsys):
    monkeypatch.setenv("TRACEGRAD_LOG", "kernels")
    f, lines = _kernel_lines(capsys, fn, *[_t(*s) for s in shapes])
    kernels = f.ir(*[_t(*s) for s in shapes], stage="kernels")
    assert len(lines) == len(re.findall(r"^  k\d+ ", kernels, re.M))        # one line per kernel built
    first = lines[0]
    assert first.startswith(f"forward k0 {kind} ops=") and ops in first and how in first.split(": ", 1)[1]


def test_kernels_of_a_split_loop_say_how_many_chunks(monkeypatch, capsys):
    monkeypatch.setenv("TRACEGRAD_LOG", "kernels")
    tg.compile(lambda x: x.exp() * 3.0)(_t(1024, 1024))
    (line,) = [t for _, t in _lines(capsys.readouterr().err, "kernels")]
    assert re.search(r"; \d+ chunks over threads$", line), line


def test_backward_for_some_gradients_logs_its_own_compile(monkeypatch, capsys):
    monkeypatch.setenv("TRACEGRAD_LOG", "stages")
    f = tg.compile(lambda x, w: ((x * w).sum(), (x + w).sum()))
    x, w = _t(4, 5, grad=True), _t(4, 5, grad=True)
    a, _ = f(x, w)
    capsys.readouterr()
    a.backward()                               # only the first output's cotangent: a backward of its own
    lines = _lines(capsys.readouterr().err, "stages")
    assert lines and lines[-1][1].startswith("backward for gradients [0] only: ")
    np.testing.assert_allclose(x.grad.numpy(), w.detach().numpy())


@pytest.mark.parametrize("value, bad", [("stage", "'stage'"), ("kernels,recompile,x", "'recompile', 'x'")])
def test_unknown_names_are_a_clear_error(value, bad, monkeypatch):
    monkeypatch.setenv("TRACEGRAD_LOG", value)
    with pytest.raises(ValueError) as e:
        tg.compile(lambda x: x + 1)(_t(3))
    msg = str(e.value)
    assert f"TRACEGRAD_LOG={value!r}" in msg and bad in msg and "stages, recompiles, kernels" in msg


def test_unset_or_empty_prints_nothing(monkeypatch, capsys):
    for value in (None, "", " , "):
        if value is None:
            monkeypatch.delenv("TRACEGRAD_LOG", raising=False)
        else:
            monkeypatch.setenv("TRACEGRAD_LOG", value)
        f = tg.compile(lambda x: (x * 2).sum())
        f(_t(4))
        f(_t(5))                                   # a retrace too
        assert capsys.readouterr().err == "" and logs.wanted() == frozenset()


def test_calls_never_read_the_setting(monkeypatch):
    """One read of TRACEGRAD_LOG per compile; a cached call reads nothing."""
    reads = []
    real = logs.wanted
    monkeypatch.setattr(logs, "wanted", lambda: reads.append(1) or real())
    f = tg.compile(lambda x: (x * 2).exp().sum())
    x = _t(16)
    f(x)
    assert len(reads) == 1
    for _ in range(50):
        f(x)
    f(_t(17))                               # a retrace: its reason, then its compile
    assert len(reads) == 3
