"""TRACEGRAD_CPU: code built for another CPU than the host (backends/cpu/host.py). x86-64-v3 code has no
AVX-512 instruction and computes what native code computes; the target is part of the disk cache
key; an unknown CPU or feature is a clear error."""
import os
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tracegrad as tg
import tracegrad.nn.functional as F
from tracegrad.backends.cpu import engine, host

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "6"))
AVX2_BUILDS = ["x86-64-v3", "+avx2,+fma,-avx512f"]
rng = np.random.default_rng(0)


def _x86():
    return "x86_64" in engine.llvm.get_default_triple()


pytestmark = pytest.mark.skipif(not _x86(), reason="x86-64 CPU names and features")


def _assembly(f, *args):
    """The machine code of f's compiled module for the current target, as assembly text."""
    return engine.target_machine().emit_assembly(engine.optimize(f.ir(*args, stage="llvm")))


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


# (function, NumPy oracle, input shapes, dtype): maps with the math library's routines, row and column
# reductions, a transposing map (register-transposed tiles sized by the vector width), a training loss
PROGRAMS = {
    "gelu_tanh": (lambda x: 0.5 * x * (1 + (0.79788456 * (x + 0.044715 * x ** 3)).tanh()),
                  lambda x: 0.5 * x * (1 + np.tanh(0.79788456 * (x + 0.044715 * x ** 3))), [(96, 257)], np.float32),
    "exp_log": (lambda x: x.exp() + (x * x + 1).log(), lambda x: np.exp(x) + np.log(x * x + 1), [(70, 130)],
                np.float32),
    "softmax_rows": (lambda x: tg.softmax(x, -1), _softmax, [(33, 1000)], np.float32),
    "sum_columns": (lambda x: x.sum(0), lambda x: x.sum(0), [(500, 77)], np.float64),
    "transposed_map": (lambda x, y: x.T * 2.0 + y, lambda x, y: x.T * 2.0 + y, [(128, 96), (96, 128)], np.float32),
    "sigmoid_f64": (lambda x: x.sigmoid() * x, lambda x: _sigmoid(x) * x, [(40, 300)], np.float64),
}


def _inputs(shapes, dtype):
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def _tol(dtype):
    return dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("build", AVX2_BUILDS)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_avx2_build_has_no_avx512_code_and_matches_native(name, build, monkeypatch):
    fn, ref, shapes, dtype = PROGRAMS[name]
    arrays = _inputs(shapes, dtype)
    args = [tg.tensor(a) for a in arrays]
    native = tg.compile(fn)
    want = native(*args).numpy()
    native_asm = _assembly(native, *args)
    monkeypatch.setenv("TRACEGRAD_CPU", build)
    assert host.vector_bytes() == 32
    avx2 = tg.compile(fn)
    got = avx2(*args).numpy()
    asm = _assembly(avx2, *args)
    assert not re.search(r"%zmm\d|%k[1-7]\b", asm), "AVX-512 registers in the x86-64-v3 build"
    assert re.search(r"%ymm\d", asm), "the AVX2 build uses 32-byte vectors"
    np.testing.assert_allclose(got, want, **_tol(dtype))
    np.testing.assert_allclose(got, ref(*arrays), **_tol(dtype))
    monkeypatch.delenv("TRACEGRAD_CPU")
    if host.vector_bytes() == 64:       # an AVX-512 host: the native build does use it (the check can fail)
        assert re.search(r"%zmm\d", native_asm)


def test_avx2_build_trains_like_native(monkeypatch):
    """A fused forward and backward (an MLP's loss and its gradients) under both builds."""
    x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in [(64, 48), (48, 80), (80, 10)])

    def loss(x, w1, w2):
        return F.cross_entropy(F.gelu(x @ w1) @ w2, tg.tensor(np.arange(64) % 10))

    def grads():
        ps = [tg.tensor(a, requires_grad=True) for a in (w1, w2)]
        f = tg.compile(loss)
        out = f(tg.tensor(x), *ps)
        out.backward()
        return [out.detach().numpy()] + [p.grad.numpy() for p in ps]

    native = grads()
    monkeypatch.setenv("TRACEGRAD_CPU", "x86-64-v3")
    for a, b in zip(grads(), native):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@settings(max_examples=EXAMPLES, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 300), seed=st.integers(0, 2 ** 16))
def test_avx2_build_normalizes_and_transposes_any_shape(rows, cols, seed):
    """Row and column softmax and a transposing map, shapes across vector and tile edges, against NumPy."""
    x = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)
    old = os.environ.get("TRACEGRAD_CPU")
    os.environ["TRACEGRAD_CPU"] = "x86-64-v3"
    try:
        f = tg.compile(lambda x: (tg.softmax(x, -1), tg.softmax(x, 0), x.T * 3.0 + 1.0))
        rows_, cols_, t = (o.numpy() for o in f(tg.tensor(x)))
    finally:
        if old is None:
            del os.environ["TRACEGRAD_CPU"]
        else:
            os.environ["TRACEGRAD_CPU"] = old
    np.testing.assert_allclose(rows_, _softmax(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cols_, _softmax(x.T).T, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(t, x.T * np.float32(3.0) + np.float32(1.0))


def test_exp_without_avx512_stays_within_one_ulp(monkeypatch):
    """Without AVX-512 the float32 exp builds 2^n from exponent bits instead of vscalefps."""
    monkeypatch.setenv("TRACEGRAD_CPU", "x86-64-v3")
    x = np.linspace(-87.0, 88.5, 200_003, dtype=np.float32)
    got = tg.compile(lambda x: x.exp())(tg.tensor(x)).numpy()
    want = np.exp(x.astype(np.float64))
    ulp = np.spacing(want.astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(got - want) / ulp) <= 1.0


def test_target_is_part_of_the_disk_cache_key(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", str(tmp_path))
    x = tg.tensor(np.linspace(-3, 3, 4096, dtype=np.float32).reshape(64, 64))
    keys = {}
    for build in ["native", "x86-64-v3", "+avx2,+fma,-avx512f"]:
        monkeypatch.setenv("TRACEGRAD_CPU", build)
        keys[build] = engine.target_id()
        f = tg.compile(lambda x: (x * 1.5).tanh())
        f(x)
        assert f.stats()["disk_hits"] == 0, f"{build} reused another build's object code"
    assert len(set(keys.values())) == 3 and "x86-64-v3" in keys["x86-64-v3"]
    assert len([p for p in os.listdir(tmp_path) if p.endswith(".o")]) == 3
    monkeypatch.setenv("TRACEGRAD_CPU", "x86-64-v3")             # the same build again: its own entry
    f = tg.compile(lambda x: (x * 1.5).tanh())
    f(x)
    assert f.stats()["disk_hits"] == 1


@pytest.mark.parametrize("spec, given_, accepted", [
    ("x86-64-v9", "'x86-64-v9' is not a CPU", "x86-64-v3"),
    ("x86-64-v3,+avx9000", "'avx9000' is not a feature", "avx512f"),
    ("+avx2,-nofeature,+bogus", "'nofeature', 'bogus' are not features", "avx2"),
    ("haswell,znver3", "names 2 CPUs (haswell, znver3)", "+avx2,+fma,-avx512f"),
])
def test_unknown_cpu_or_feature_is_a_clear_error(spec, given_, accepted, monkeypatch):
    monkeypatch.setenv("TRACEGRAD_CPU", spec)
    f = tg.compile(lambda x: x + 1.0)
    with pytest.raises(ValueError) as e:
        f(tg.tensor(np.ones(3, np.float32)))
    assert f"TRACEGRAD_CPU={spec!r}" in str(e.value) and given_ in str(e.value) and accepted in str(e.value)


def test_native_is_the_host(monkeypatch):
    monkeypatch.delenv("TRACEGRAD_CPU", raising=False)
    default = host.current()
    assert default.cpu == engine.llvm.get_host_cpu_name()
    assert default.features == engine.llvm.get_host_cpu_features().flatten()
    monkeypatch.setenv("TRACEGRAD_CPU", "native")
    assert host.current()[1:3] == default[1:3]


@pytest.mark.parametrize("slow", [True, False])
def test_maps_are_built_without_gathers_where_they_are_slow(slow, monkeypatch):
    """Where the host's vector gathers are slow (AVX-512 on AMD Zen: host.slow_gathers), a map kernel's
    function asks LLVM for none (prefer-no-gather, with the target's features); a row reduction keeps
    them; the values are the same."""
    from tracegrad.backends.cpu.plan import Kind, Strategy
    monkeypatch.setattr(host, "slow_gathers", lambda: slow)
    assert host.no_gathers(Strategy(Kind.MAP)) == "" and host.current().features in \
        host.no_gathers(Strategy(Kind.MAP, gathers=False))
    x, idx = rng.standard_normal((40, 37)).astype(np.float32), rng.integers(0, 40, 300)
    f = tg.compile(lambda x, i: (x[i] * 2.0, (x.T * x.T).sum(1)))
    got = f(tg.tensor(x), tg.tensor(idx))
    np.testing.assert_allclose(got[0].numpy(), x[idx] * 2, rtol=1e-6)
    np.testing.assert_allclose(got[1].numpy(), (x.T * x.T).sum(1), rtol=1e-5)
    defines = [line for line in f.ir(tg.tensor(x), tg.tensor(idx), stage="llvm").splitlines()
               if line.startswith("define internal")]
    assert sum("prefer-no-gather" in line for line in defines) == (1 if slow else 0), defines


def test_tuning_flags_are_no_features_the_host_could_lack(monkeypatch):
    monkeypatch.setenv("TRACEGRAD_CPU", "x86-64-v3,+prefer-no-gather")
    x = rng.standard_normal((9, 33)).astype(np.float32)
    np.testing.assert_allclose(tg.compile(lambda t: t * 3.0)(tg.tensor(x)).numpy(), x * 3, rtol=1e-6)


def test_a_feature_the_host_lacks_is_refused_before_any_code_runs(monkeypatch):
    import llvmlite.binding as llvm
    have = llvm.get_host_cpu_features()
    candidates = ("amx-tile", "avx512fp16", "xop", "fma4", "avx512vp2intersect")
    lacking = next((f for f in candidates if not have.get(f, True)), None)
    if lacking is None:
        pytest.skip("this CPU has every feature the test would ask for")
    monkeypatch.setenv("TRACEGRAD_CPU", f"x86-64-v3,+{lacking}")
    with pytest.raises(ValueError, match=f"features this CPU lacks \\({lacking}\\)"):
        tg.compile(lambda x: x * 2.0)(tg.tensor(np.ones(4, np.float32)))


def test_bench_cpu_runs_the_bench_under_that_build(monkeypatch, capsys):
    import tracegrad.bench
    from tracegrad.__main__ import main
    monkeypatch.setenv("TRACEGRAD_CPU", "native")     # the command sets it in os.environ: restored after the test
    seen = []
    monkeypatch.setattr(tracegrad.bench, "main", lambda **kw: seen.append(tracegrad.bench.target()) or 0)
    assert main(["bench", "--quick", "--cpu", "x86-64-v3"]) == 0
    assert seen == ["x86-64-v3 (LLVM CPU x86-64-v3, 32-byte vectors)"]
    assert main(["bench", "--cpu", "x86-64-v3", "--cpu", "x86-64-v9"]) == 2 and len(seen) == 1   # checked first
    assert main(["bench", "--cpu", "native", "--cpu", "+avx2,+fma,-avx512f"]) == 0
    assert seen[1].startswith("native (LLVM CPU ") and seen[2].startswith("+avx2,+fma,-avx512f (") and \
        seen[2].endswith(", 32-byte vectors)")
    err = capsys.readouterr().err
    assert err.startswith("tracegrad bench --cpu: TRACEGRAD_CPU='x86-64-v9': 'x86-64-v9' is not a CPU") and \
        "x86-64-v3" in err


def test_the_cpu_names_are_known_after_llvm_listed_them_once_in_this_process(monkeypatch):
    """LLVM prints its `cpu=help` listing once per process: a second copy of tracegrad in the process (as
    bench.ab loads) still knows the CPU names, from a child process."""
    import llvmlite.binding as llvm
    host.initialize()
    host._stderr_of(lambda: llvm.Target.from_default_triple().create_target_machine(cpu="help"))
    monkeypatch.setattr(host, "_ACCEPTED", [])
    cpus, features = host._accepted()
    assert llvm.get_host_cpu_name() in cpus and features


def test_kernel_by_kernel_module_is_built_for_the_programs_target(monkeypatch):
    """profile() and check mode compile a program's step module on first use: for the target the
    program's IR was written for, not the one TRACEGRAD_CPU names by then (native IR's exp, an
    llvm.ldexp, built for x86-64-v3 became a call per element: W12's exp kernels 7x slower)."""
    for first, later in (("native", "x86-64-v3"), ("x86-64-v3", "native")):
        monkeypatch.setenv("TRACEGRAD_CPU", first)
        f = tg.compile(lambda x: (x * 0.5).exp().sum(1))
        x = tg.tensor(rng.standard_normal((33, 65)).astype(np.float32))
        want = f(x).numpy()
        built = []
        real = engine.compile_module
        monkeypatch.setattr(engine, "compile_module", lambda text: built.append(host.current().spec) or real(text))
        monkeypatch.setenv("TRACEGRAD_CPU", later)
        assert [r["ops"] for r in f.profile(x)] == [["mul", "exp", "sum"]]
        assert built == [first] and host.current().spec == later
        np.testing.assert_array_equal(f(x).numpy(), want)
        monkeypatch.setattr(engine, "compile_module", real)
