"""`python -m tracegrad bench --cpu native,x86-64-v3`: one table, a compiled column per build, each
build run in a process of its own (bench/builds.py); a list of CPU names is several builds, a name
with feature changes one."""
import pytest

from tracegrad.__main__ import _builds
from tracegrad.bench import builds
from tracegrad.backends.cpu import engine

X86 = "x86_64" in engine.llvm.get_default_triple()


def test_a_list_of_cpu_names_is_several_builds():
    assert _builds("native,x86-64-v3") == ["native", "x86-64-v3"]
    assert _builds(" native , x86-64-v3 ,") == ["native", "x86-64-v3"]
    assert _builds("x86-64-v3") == [] and _builds("skylake,-avx512f") == [] and _builds("+avx2,+fma") == []


@pytest.mark.skipif(not X86, reason="x86-64 CPU names")
def test_each_build_gets_a_checked_column(monkeypatch):
    monkeypatch.setattr(builds, "available_columns", lambda: ["numpy", "tg eager", "tg compiled"])
    lines = []
    assert builds.main(["native", "x86-64-v3"], workload="W6", quick=True, repeats=1, out=lines.append) == 0
    text = "\n".join(lines)
    head = next(line for line in lines if line.startswith("workload"))
    assert head.split()[1:] == ["numpy", "tg", "eager", "tg", "compiled", "native", "tg", "compiled", "x86-64-v3"]
    row = next(line for line in lines if line.startswith("W6 ") and "(" in line)
    assert "FAILED" not in row and len(row.split()) == 2 + 2 * 4, row
    assert "x86-64-v3: x86-64-v3 (LLVM CPU x86-64-v3, 32-byte vectors)" in text


def test_a_build_whose_process_fails_is_named(monkeypatch):
    """A child process that exits with an error (here: a CPU name LLVM does not know) fails the run with
    the build named, not with subprocess's CalledProcessError."""
    monkeypatch.setattr(builds, "available_columns", lambda: ["numpy", "tg compiled"])
    lines = []
    assert builds.main(["no-such-cpu"], workload="W5", quick=True, repeats=1, out=lines.append) == 1
    assert "FAIL build no-such-cpu: its process exited with an error" in lines[-1]


def test_peers_keep_to_the_builds_instruction_set():
    """An AVX2 build on an AVX-512 host runs torch (and torch.compile's code, and jax) on AVX2 too; the host's own
    build changes nothing; a peer's column carries its build's name unless native."""
    assert builds.peer_env(64, 64) == {} and builds.peer_env(32, 32) == {}
    env = builds.peer_env(32, 64)
    assert env["ATEN_CPU_CAPABILITY"] == "avx2" and env["XLA_FLAGS"].endswith("--xla_cpu_max_isa=AVX2")
    assert env["TORCHINDUCTOR_CACHE_DIR"].endswith("_avx2")       # torch.compile's cache keys miss the ISA
    assert builds.peer_env(16, 64)["ATEN_CPU_CAPABILITY"] == "default" and "XLA_FLAGS" not in builds.peer_env(16, 64)
    assert builds._named("torch built-in", "x86-64-v3") == "torch built-in x86-64-v3"
    assert builds._named("torch built-in", "native") == "torch built-in"
    assert builds._named("tg compiled", "native") == "tg compiled native" and builds._named("numpy", "x86-64-v3") == "numpy"
