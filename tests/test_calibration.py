"""The machine-dependent thresholds (backends/cpu/machine.py, calibrate.py): measured values within their
ranges, cached and read back by a second process without measuring, a corrupt, foreign or oversized
file ignored and measured again, hand-set values checked, the disk cache key changed by a threshold
that shapes code, and compiled programs equal to eager under the smallest and largest legal
thresholds (every threshold changes speed only)."""
import json
import os
import stat
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tracegrad as tg
import tracegrad.nn.functional as F
from tracegrad.backends.cpu import calibrate, engine, machine

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT_ONLY = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="os.chown needs root")


@pytest.fixture
def on(tmp_path, monkeypatch):
    """Calibration on, in a cache directory of its own; `measures` counts the measurements."""
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRACEGRAD_CALIBRATION", "on")
    monkeypatch.delenv("TRACEGRAD_THRESHOLDS", raising=False)
    monkeypatch.setattr(machine, "_VALUES", {})
    monkeypatch.setattr(machine, "_reported", set())
    measures, real = [], calibrate.measure
    monkeypatch.setattr(calibrate, "measure", lambda: measures.append(1) or real())
    return measures


def _within(values):
    for name, f in machine.FIELDS.items():
        v = values[name]
        assert type(v) is int and f.lo <= v <= f.hi and v % f.step == 0, (name, v)


def test_measured_values_are_within_their_ranges_and_written_private(on):
    values, facts, now = machine.calibrated()
    assert now and on == [1]
    _within(values)
    assert machine.current() == values
    assert facts["l1d"] > 0 and facts["l2"] >= facts["l1d"] and facts["llc"] >= facts["l2"]
    assert facts["wake_ns"] > 0 and facts["element_ns"] > 0 and facts["pause_ns"] > 0
    st_ = os.stat(machine.path())
    assert st_.st_uid == os.geteuid() and not stat.S_IMODE(st_.st_mode) & 0o077
    assert machine.calibrated() == (values, facts, False) and on == [1]       # read back, not measured


def test_derived_values_follow_the_facts():
    """Larger caches give larger blocks; a single thread never splits; a slower pause spins fewer times."""
    base = {"l1d": 32 << 10, "l2": 1 << 20, "llc": 32 << 20, "wake_ns": 10000, "element_ns": 0.15,
            "pause_ns": 25, "threads": 2}
    small, big = machine.clamp(calibrate.derive(base)), machine.clamp(calibrate.derive(
        dict(base, l1d=128 << 10, l2=4 << 20, pause_ns=100)))
    assert small == {**machine.defaults(), "stream_min_bytes": 2 << 20, "spin_budget": 40000}
    assert big["tile"] == 64 and big["online_block"] > small["online_block"] and big["block_bytes"] == 4 << 20
    assert big["spin_budget"] == 10000
    alone = machine.clamp(calibrate.derive(dict(base, threads=1)))
    assert alone["parallel_min_work"] == machine.FIELDS["parallel_min_work"].hi
    _within(big)


CHILD = ("import json, tracegrad; from tracegrad.backends.cpu import machine; v, f, now = machine.calibrated(); "
         "print(json.dumps([v, now]))")


def test_a_second_process_reads_the_values_back(tmp_path):
    env = dict(os.environ, TRACEGRAD_CACHE_DIR=str(tmp_path / "cache"), TRACEGRAD_CALIBRATION="on",
               PYTHONPATH=ROOT)
    env.pop("TRACEGRAD_THRESHOLDS", None)
    runs = [json.loads(subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                                      check=True).stdout) for _ in range(2)]
    assert runs[0][1] is True and runs[1][1] is False and runs[0][0] == runs[1][0]


def _good(path):
    return json.loads(open(path).read())


def _spoil(path, how):
    data = _good(path)
    if how == "corrupt":
        open(path, "w").write(json.dumps(data)[:-40])
    elif how == "oversized":
        open(path, "w").write(json.dumps(dict(data, pad="x" * machine.MAX_FILE_BYTES)))
    elif how == "other key":
        open(path, "w").write(json.dumps(dict(data, key="another machine")))
    elif how == "other version":
        open(path, "w").write(json.dumps(dict(data, version=machine.VERSION + 1)))
    elif how == "not a number":
        open(path, "w").write(json.dumps(dict(data, values=dict(data["values"], tile="32"))))
    elif how == "g+w":
        os.chmod(path, 0o620)
    elif how == "chown":
        os.chown(path, 54321, -1)
    elif how == "symlink":
        os.replace(path, path + ".real")
        os.symlink(path + ".real", path)


@pytest.mark.parametrize("how", ["corrupt", "oversized", "other key", "other version", "not a number", "g+w",
                                 "symlink", pytest.param("chown", marks=ROOT_ONLY)])
def test_a_bad_file_is_ignored_with_a_warning_and_measured_again(on, how):
    machine.calibrated()
    _spoil(machine.path(), how)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        values, _, now = machine.calibrated()
    assert now and on == [1, 1]
    assert any(machine.path() in str(w.message) for w in caught), [str(w.message) for w in caught]
    _within(values)
    assert machine.calibrated()[2] is False and on == [1, 1]     # the file written again is read back


def test_values_read_back_are_clamped(on):
    machine.calibrated()
    data = _good(machine.path())
    data["values"].update(tile=1000, parallel_min_work=1, online_block=700)
    open(machine.path(), "w").write(json.dumps(data))
    values, _, now = machine.calibrated()
    assert not now
    assert values["tile"] == 64 and values["parallel_min_work"] == 1 << 16 and values["online_block"] == 640
    _within(values)


def test_calibration_off_gives_the_defaults_and_hand_set_values_are_checked(monkeypatch):
    monkeypatch.setenv("TRACEGRAD_CALIBRATION", "off")
    monkeypatch.setenv("TRACEGRAD_THRESHOLDS", "tile=64, stream_min_bytes=3M")
    assert machine.current() == {**machine.defaults(), "tile": 64, "stream_min_bytes": 3 << 20}
    for text, says in [("tiles=64", "not name=value"), ("tile=48", "in steps of 32"), ("tile=x", "not name=value"),
                       ("scratch_limit=0", "outside what the code generator can use")]:
        monkeypatch.setenv("TRACEGRAD_THRESHOLDS", text)
        with pytest.raises(ValueError, match=says):
            machine.current()
    monkeypatch.delenv("TRACEGRAD_THRESHOLDS")
    monkeypatch.setenv("TRACEGRAD_CALIBRATION", "sometimes")
    with pytest.raises(ValueError, match="write on"):
        machine.current()


def test_the_disk_cache_key_changes_with_a_threshold_that_shapes_code(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", str(tmp_path / "cache"))
    base = engine.target_id()
    for name, f in machine.FIELDS.items():
        with machine.override(**{name: f.legal_hi}):
            assert (engine.target_id() != base) == f.code, name
    x = tg.tensor(np.linspace(-1, 1, 600, dtype=np.float32).reshape(20, 30))

    def hits():
        f = tg.compile(lambda t: (t * 3.0).tanh().sum(0))
        np.testing.assert_allclose(f(x).numpy(), np.tanh(x.numpy() * 3).sum(0), rtol=1e-5, atol=1e-5)
        return f.stats()["disk_hits"]
    assert [hits(), hits()] == [0, 1]
    with machine.override(parallel_min_work=1 << 30):     # the same kernels, under another threshold: rebuilt
        assert [hits(), hits()] == [0, 1]


EXTREMES = {"smallest": {n: f.legal_lo for n, f in machine.FIELDS.items()},
            "largest": {n: f.legal_hi for n, f in machine.FIELDS.items()}}
EXTREMES["largest, split"] = dict(EXTREMES["largest"], parallel_min_work=1)


def _layer_norm_grads(x, w, b):
    x, w, b = (t.detach().requires_grad_() for t in (x, w, b))
    (F.layer_norm(x, (x.shape[-1],), w, b).tanh() * x).sum().backward()
    return x.grad, w.grad, b.grad


def _broadcast_grad(x, w, b):
    w = w.detach().requires_grad_()
    return tg.autograd.grad((x * w + b).sigmoid().sum(), [w])[0]


# programs that meet every threshold: maps (streamed or split), row and column reductions, an online
# softmax over rows and over columns, transposing maps and sums across rows, a norm's backward
PROGRAMS = {
    "softmax_rows": lambda x, w, b: tg.softmax(x * 1.5, -1),
    "softmax_columns": lambda x, w, b: tg.softmax(x, 0),
    "gelu": lambda x, w, b: F.gelu(x) + b,
    "column_sums": lambda x, w, b: ((x * w).exp().sum(0), (x - b).amax(0)),
    "transposed": lambda x, w, b: (x.T * 2.0 + 1.0, (x.T * w[:, None]).sum(1)),
    "layer_norm": _layer_norm_grads,
    "broadcast_grad": _broadcast_grad,
}


def _outs(v):
    return [t.numpy() for t in (v if isinstance(v, tuple) else (v,))]


@settings(max_examples=int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "10")), deadline=None)
@given(name=st.sampled_from(sorted(PROGRAMS)), extreme=st.sampled_from(sorted(EXTREMES)),
       rows=st.integers(1, 150), cols=st.sampled_from([1, 7, 64, 129, 300]),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2 ** 31 - 1))
def test_compiled_programs_equal_eager_under_extreme_thresholds(name, extreme, rows, cols, dtype, seed):
    rng = np.random.default_rng(seed)
    args = [tg.tensor(rng.standard_normal(s).astype(dtype)) for s in ((rows, cols), (cols,), (cols,))]
    fn = PROGRAMS[name]
    want = _outs(fn(*args))
    with machine.override(**EXTREMES[extreme]):
        f = tg.compile(fn)
        got = [_outs(f(*args)) for _ in range(2)]
    tol = dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-9)
    for call in got:
        for g, w in zip(call, want):
            np.testing.assert_allclose(g, w, **tol)


def test_the_extremes_reach_the_code():
    """The smallest thresholds stream every fresh output and split every kernel; the largest neither
    (so the test above compares the code each extreme builds)."""
    x, b = tg.tensor(np.ones((64, 129), np.float32)), tg.tensor(np.ones(129, np.float32))
    seen = []
    for extreme in ("smallest", "largest"):
        with machine.override(**EXTREMES[extreme]):
            f = tg.compile(lambda x, b: F.gelu(x) + b)
            text = f.ir(x, b, stage="llvm")
            f(x, b)
            entry, _ = f._entry_for((x, b), {})
            seen.append(("streamed stores" in text, any(p.regions for p in entry.programs if p is not None)))
    assert seen == [(True, True), (False, False)]
