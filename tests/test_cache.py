"""The disk cache of compiled code (SPEC §5, lowering/cache.py): a new process skips LLVM, corrupt
entries are rebuilt with one warning, concurrent writers leave valid entries, the key follows
the IR text, the target and the versions, and the size cap prunes least recently used entries."""
import hashlib
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.backends.cpu import engine
from tracegrad.lowering import cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import tracegrad as tg
    import tracegrad.nn.functional as F
    from tracegrad.backends.cpu import engine

    calls = []
    real = engine.optimize
    def counting(text):
        calls.append(1)
        return real(text)
    engine.optimize = counting          # every LLVM optimization + codegen goes through here

    scale = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    @tg.compile
    def f(x, w):
        return F.softmax(x @ w * scale, axis=-1).sum(axis=0)

    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal((8, 5)).astype(np.float32))
    w = tg.tensor(rng.standard_normal((5, 7)).astype(np.float32))
    out = f(x, w).numpy()
    z = (x.numpy() @ w.numpy()) * scale
    e = np.exp(z - z.max(-1, keepdims=True))
    assert np.allclose(out, (e / e.sum(-1, keepdims=True)).sum(0), rtol=1e-4, atol=1e-5), out
    print("disk_hits", f.stats()["disk_hits"], "llvm_compiles", len(calls))
""")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", str(d))
    monkeypatch.setattr(cache, "_reported", set())
    return d


def _run(script, cache_dir, *argv):
    env = dict(os.environ, TRACEGRAD_CACHE_DIR=str(cache_dir), PYTHONPATH=ROOT)
    return subprocess.Popen([sys.executable, str(script), *argv], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _parse(proc):
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    words = out.split()
    return int(words[words.index("disk_hits") + 1]), int(words[words.index("llvm_compiles") + 1]), err


def _entries(d):
    return sorted(p for p in os.listdir(d) if p.endswith(".o") and not p.startswith("."))


def test_new_process_skips_llvm(tmp_path, cache_dir):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    hits, compiles, _ = _parse(_run(script, cache_dir))
    assert (hits, compiles) == (0, 1)
    assert len(_entries(cache_dir)) == 1
    hits, compiles, err = _parse(_run(script, cache_dir))
    assert hits >= 1 and compiles == 0, err
    assert len(_entries(cache_dir)) == 1


def test_concurrent_writers_leave_valid_entries(tmp_path, cache_dir):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    # several processes compile the same function (one key) and others a different one (another key)
    procs = [_run(script, cache_dir, "2.0" if i % 2 else "3.0") for i in range(6)]
    for p in procs:
        _parse(p)
    names = _entries(cache_dir)
    assert len(names) == 2
    assert not [n for n in os.listdir(cache_dir) if n.startswith(".tmp")]     # no temporary files left
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in names:
            assert cache.load(n[:-2]) is not None
    hits, compiles, _ = _parse(_run(script, cache_dir, "3.0"))
    assert hits >= 1 and compiles == 0


def _compile_and_check(x):
    f = tg.compile(lambda x: (x * 2.0).exp().sum(axis=-1))
    np.testing.assert_allclose(f(x).numpy(), np.exp(x.numpy() * 2).sum(-1), rtol=1e-5)
    return f


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_corrupt_entry_is_rebuilt_with_one_warning(cache_dir, damage):
    x = tg.tensor(np.random.default_rng(0).standard_normal((4, 9)).astype(np.float32))
    assert _compile_and_check(x).stats()["disk_hits"] == 0
    (name,) = _entries(cache_dir)
    path = cache_dir / name
    data = path.read_bytes()
    assert data.startswith(cache.MAGIC)
    if damage == "truncate":
        path.write_bytes(data[:len(data) // 2])
    elif damage == "flip":
        path.write_bytes(data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:])
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        path.write_bytes(b"\x7fELF not an object file at all" * 10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = _compile_and_check(x)                # a fresh compiled function: reads the disk cache
    assert f.stats()["disk_hits"] == 0
    msgs = [w for w in caught if issubclass(w.category, RuntimeWarning) and "cache" in str(w.message)]
    assert len(msgs) == 1, [str(w.message) for w in caught]
    assert name in str(msgs[0].message)
    assert cache.load(name[:-2]) is not None     # rebuilt and valid again
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _compile_and_check(x).stats()["disk_hits"] == 1


def test_key_follows_ir_text_target_and_versions(cache_dir, monkeypatch):
    x = tg.tensor(np.ones((3, 4), np.float32))
    tg.compile(lambda x: x * 2.0)(x)
    assert len(_entries(cache_dir)) == 1
    assert tg.compile(lambda x: x * 2.0)(x) is not None and len(_entries(cache_dir)) == 1   # same IR: same key
    out = tg.compile(lambda x: x * 3.0)(x)                                                   # IR text differs
    np.testing.assert_array_equal(out.numpy(), np.full((3, 4), 3.0, np.float32))
    assert len(_entries(cache_dir)) == 2
    tg.compile(lambda x: x * 2.0)(tg.tensor(np.ones((3, 5), np.float32)))                  # shape is in the IR
    assert len(_entries(cache_dir)) == 3
    monkeypatch.setattr(tg._version, "__version__", tg.__version__ + ".test")                         # tracegrad version
    f = tg.compile(lambda x: x * 2.0)
    f(x)
    assert f.stats()["disk_hits"] == 0 and len(_entries(cache_dir)) == 4
    real = engine.target_id
    monkeypatch.setattr(engine, "target_id", lambda: real().replace("llvmlite", "llvmlite-other"))
    f = tg.compile(lambda x: x * 2.0)
    f(x)
    assert f.stats()["disk_hits"] == 0 and len(_entries(cache_dir)) == 5
    tid = real()
    import llvmlite
    import llvmlite.binding as llvm
    assert llvm.get_host_cpu_name() in tid and llvm.get_host_cpu_features().flatten() in tid
    assert llvmlite.__version__ in tid and ".".join(map(str, llvm.llvm_version_info)) in tid


def test_unwritable_cache_dir_warns_and_still_runs(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", str(blocker / "sub"))
    x = tg.tensor(np.ones((2, 3), np.float32))
    with pytest.warns(RuntimeWarning, match="cannot write"):
        out = tg.compile(lambda x: x + 1.0)(x)
    np.testing.assert_array_equal(out.numpy(), np.full((2, 3), 2.0, np.float32))


def _payload(key, size):
    return (hashlib.sha256(key.encode()).digest() * (size // 32 + 1))[:size]


def _bytes(d):
    return sum(os.path.getsize(os.path.join(d, n)) for n in _entries(d))


def _key(name):
    return hashlib.sha256(name.encode()).hexdigest()


def _names(*names):
    return sorted(_key(n) + ".o" for n in names)


def test_size_cap_prunes_least_recently_used(cache_dir, monkeypatch):
    head = len(cache.MAGIC) + 64
    monkeypatch.setenv("TRACEGRAD_CACHE_SIZE", str(3 * (head + 1000)))      # room for three entries
    t = 1_000_000_000
    for i, key in enumerate("abc"):
        cache.store(_key(key), _payload(key, 1000))
        os.utime(cache_dir / f"{_key(key)}.o", (t + i, t + i))            # a, b, c: oldest to newest
    assert cache.load(_key("a")) == _payload("a", 1000)                  # a load makes "a" recent
    cache.store(_key("d"), _payload("d", 1000))
    assert _entries(cache_dir) == _names("a", "c", "d") and _bytes(cache_dir) <= cache.max_size()
    cache.store(_key("e"), _payload("e", 2000))                          # a big one pushes out two
    assert _entries(cache_dir) == _names("d", "e")
    assert _bytes(cache_dir) <= cache.max_size()
    assert cache.load(_key("b")) is None                                 # pruned: a miss, no warning
    monkeypatch.setenv("TRACEGRAD_CACHE_SIZE", "0")
    cache.store(_key("f"), _payload("f", 10))
    assert _entries(cache_dir) == []


def test_stale_temporary_files_are_pruned_and_fresh_ones_kept(cache_dir):
    cache.store(_key("a"), b"x" * 100)
    stale, fresh = cache_dir / ".tmp-dead1234.o", cache_dir / ".tmp-writing.o"
    stale.write_bytes(cache.MAGIC[:4])                                   # a writer died after 4 bytes
    fresh.write_bytes(cache.MAGIC[:4])
    old = os.path.getmtime(stale) - cache.STALE_TEMP_SECONDS - 10
    os.utime(stale, (old, old))
    cache.prune()
    assert not stale.exists() and fresh.exists() and _entries(cache_dir) == _names("a")


@pytest.mark.parametrize("text,size", [("1000", 1000), ("64K", 65536), ("1.5M", 1572864), ("2g", 2 << 30),
                                       ("10 MiB", 10 << 20), ("", cache.DEFAULT_SIZE)])
def test_cache_size_setting(monkeypatch, text, size):
    monkeypatch.setenv("TRACEGRAD_CACHE_SIZE", text)
    assert cache.max_size() == size


def test_bad_cache_size_setting_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("TRACEGRAD_CACHE_SIZE", "lots")
    with pytest.raises(ValueError, match=r"TRACEGRAD_CACHE_SIZE='lots' is not a size.*500M"):
        cache.max_size()


CHURN = textwrap.dedent("""
    import hashlib, random, sys, warnings
    from tracegrad.lowering import cache
    warnings.simplefilter("error")           # a corrupt entry would warn: make it fail
    seed = int(sys.argv[1])
    rng = random.Random(seed)
    def payload(i):
        return (hashlib.sha256(str(i).encode()).digest() * 200)[:1000 + i * 37]
    hits = 0
    for _ in range(300):
        i = rng.randrange(40)
        key = hashlib.sha256(str(i).encode()).hexdigest()
        got = cache.load(key)
        if got is None:
            cache.store(key, payload(i))
        else:
            assert got == payload(i), i
            hits += 1
    print("hits", hits)
""")


def test_concurrent_writers_and_pruners_never_corrupt(tmp_path, cache_dir):
    """Processes that load, write and prune at once under a tiny cap: every load is whole and right."""
    script = tmp_path / "churn.py"
    script.write_text(CHURN)
    env = dict(os.environ, TRACEGRAD_CACHE_DIR=str(cache_dir), PYTHONPATH=ROOT, TRACEGRAD_CACHE_SIZE="12K")
    procs = [subprocess.Popen([sys.executable, str(script), str(seed)], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for seed in range(4)]
    for p in procs:
        out, err = p.communicate()
        assert p.returncode == 0 and out.startswith("hits"), err[-2000:]
    cache.prune(12 << 10)
    assert _bytes(cache_dir) <= 12 << 10
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in _entries(cache_dir):
            assert cache.load(n[:-2]) is not None


def test_a_store_scans_the_directory_only_when_a_prune_is_due(cache_dir, monkeypatch):
    """Under the cap a store prunes (a scan of the whole directory) on its first store and then once per
    PRUNE_EVERY; a store that takes the running count past the cap prunes at once, and the cap holds."""
    head = len(cache.MAGIC) + 64
    monkeypatch.setenv("TRACEGRAD_CACHE_SIZE", str(1000 * (head + 50)))
    scans, prune = [], cache.prune
    monkeypatch.setattr(cache, "prune", lambda limit=None: scans.append(1) or prune(limit))
    n = 2 * cache.PRUNE_EVERY + 1
    for i in range(n):
        cache.store(_key(f"k{i}"), _payload(f"k{i}", 50))
    assert len(scans) == 3 and len(_entries(cache_dir)) == n
    monkeypatch.setenv("TRACEGRAD_CACHE_SIZE", str(100 * (head + 50)))       # room for 100 entries
    for i in range(100):
        cache.store(_key(f"m{i}"), _payload(f"m{i}", 50))
        assert _bytes(cache_dir) <= cache.max_size()
    assert len(_entries(cache_dir)) == 100
