"""The disk cache runs code, so it is private and prunes only its own files (lowering/cache.py): a
directory or entry of another user, or writable by group or others, is never loaded (one warning
names it; the code is compiled without the cache), an entry planted with a computable checksum fails
its HMAC, files that tracegrad did not write survive every prune, failed writes leave no temporary
file, and numba.cuda's kernel files under <cache>/cuda are private and count toward the cap too.
Tests that give a file to another user need root (os.chown); the mode tests run as anyone."""
import hashlib
import os
import pathlib
import stat
import warnings

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.backends.cpu import engine
from tracegrad.lowering import cache
from tracegrad.backends.cuda import compile as build

OTHER_UID = 54321
ROOT_ONLY = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="os.chown needs root")
KERNEL = "def k(b0):\n    b0[0] = float32(1.0)\n"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", str(d))
    monkeypatch.delenv("TRACEGRAD_CACHE_SIZE", raising=False)
    monkeypatch.setattr(cache, "_reported", set())
    return d


@pytest.fixture
def compiles(monkeypatch):
    """How many times LLVM optimized a module (a cache miss) since the test began."""
    calls, real = [], engine.optimize
    monkeypatch.setattr(engine, "optimize", lambda text: calls.append(1) or real(text))
    return calls


def _run(scale):
    """A fresh compiled function (it reads the disk cache); its value checked against NumPy."""
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    f = tg.compile(lambda t: (t * scale).exp().sum(axis=-1))
    np.testing.assert_allclose(f(tg.tensor(x)).numpy(), np.exp(x * scale).sum(-1), rtol=1e-5)
    return f


def _entries(d):
    return sorted(n for n in os.listdir(d) if n.endswith(".o") and not n.startswith("."))


def _refused(caught, path):
    """The cache warnings caught: exactly one, naming `path`."""
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning) and "cache" in str(w.message)]
    assert len(msgs) == 1 and str(path) in msgs[0], msgs
    return msgs[0]


def test_the_directory_is_made_private_whatever_the_umask(cache_dir):
    old = os.umask(0)
    try:
        _run(2.0)
        assert build._write(build.module_text(KERNEL), "a" * 64)[1]
    finally:
        os.umask(old)
    for d in (cache_dir, cache_dir / "cuda", cache_dir / "cuda" / "__pycache__"):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, d
    assert stat.S_IMODE(os.stat(cache_dir / ".key").st_mode) == 0o600


def _give_away(path, how):
    if how == "chown":
        os.chown(path, OTHER_UID, -1)
    else:
        os.chmod(path, os.stat(path).st_mode | (stat.S_IWGRP if how == "g+w" else stat.S_IWOTH))


HOW = [pytest.param("chown", marks=ROOT_ONLY), "g+w", "o+w"]


@pytest.mark.parametrize("how", HOW)
def test_a_directory_not_private_is_never_loaded(cache_dir, compiles, how):
    assert _run(2.0).stats()["disk_hits"] == 0 and len(_entries(cache_dir)) == 1
    _give_away(cache_dir, how)
    for _ in range(2):                          # warned once; compiled again each time, nothing written
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert _run(2.0).stats()["disk_hits"] == 0
        if _ == 0:
            assert "compiling without the cache" in _refused(caught, cache_dir)
        else:
            assert not [w for w in caught if "cache" in str(w.message)]
    assert len(compiles) == 3 and len(_entries(cache_dir)) == 1


@pytest.mark.parametrize("how", HOW)
def test_an_entry_not_private_is_never_loaded_and_is_replaced(cache_dir, compiles, how):
    _run(2.0)
    (name,) = _entries(cache_dir)
    _give_away(cache_dir / name, how)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _run(2.0).stats()["disk_hits"] == 0
    assert "not loaded" in _refused(caught, cache_dir / name) and len(compiles) == 2
    assert not cache.unsafe(os.stat(cache_dir / name))          # our own entry took its place
    assert _run(2.0).stats()["disk_hits"] == 1 and len(compiles) == 2


def test_a_planted_entry_with_a_computable_checksum_is_rejected(cache_dir, compiles):
    """Another function's machine code under this function's key, with a SHA-256 of the payload (what
    anyone can compute) where the signature goes: it would return x * 3; the HMAC rejects it."""
    _run(3.0)
    (three,) = _entries(cache_dir)
    payload = (cache_dir / three).read_bytes()[len(cache.MAGIC) + 64:]
    _run(2.0)
    (two,) = set(_entries(cache_dir)) - {three}
    (cache_dir / two).write_bytes(cache.MAGIC + hashlib.sha256(payload).hexdigest().encode() + payload)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _run(2.0).stats()["disk_hits"] == 0              # _run checks the value: x * 2
    _refused(caught, cache_dir / two)


@pytest.mark.parametrize("how", HOW)
def test_cuda_kernel_files_not_private_are_not_cached(cache_dir, how):
    text, key = build.module_text(KERNEL), "b" * 64
    path, cached = build._write(text, key)
    assert cached and path == str(cache_dir / "cuda" / f"{key}.py")
    index = cache_dir / "cuda" / "__pycache__" / f"{key}.k-2.py311.nbi"      # numba's name for its index
    index.write_bytes(cache.PICKLE + b"numba's pickle")
    _give_away(index, how)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path, cached = build._write(text, key)
    _refused(caught, index)
    assert not cached and not path.startswith(str(cache_dir)) and open(path).read() == text
    _give_away(cache_dir / "cuda", how)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not build._write(text, "c" * 64)[1]
    _refused(caught, cache_dir / "cuda")


def test_an_uncached_kernel_gets_a_dispatcher_without_a_file_cache(cache_dir):
    """numba.cuda's dispatcher (no GPU needed until it compiles) caches only a kernel whose files are private."""
    pytest.importorskip("numba.cuda")
    if build.simulated():
        pytest.skip("the simulator has no file cache")
    body = KERNEL.replace("1.0", "7.0")
    assert type(build.kernel(body, "k")._cache).__name__ != "NullCache"
    os.chmod(cache_dir / "cuda", 0o777)
    build._KERNELS.clear()
    with pytest.warns(RuntimeWarning, match="cuda"):
        assert type(build.kernel(body, "k")._cache).__name__ == "NullCache"


def _ours(d, name, size, age):
    """A file tracegrad wrote (`name` in `d`, under `size` bytes), `age` seconds old."""
    key = hashlib.sha256(name.encode()).hexdigest()
    if d.name == "cuda":
        path = d / f"{key}.py"
        path.write_bytes(cache.CUDA_MARK + b"x" * size)
        index = d / "__pycache__" / f"{key}.k-2.py311.nbi"
        index.write_bytes(cache.PICKLE + b"y" * size)
        paths = [path, index]
    else:
        cache.store(key, b"z" * size)
        paths = [d / f"{key}.o"]
    for p in paths:
        t = os.path.getmtime(p) - age
        os.utime(p, (t, t))
    return paths


def test_prune_deletes_only_tracegrads_files(cache_dir, monkeypatch):
    cache.store(hashlib.sha256(b"mine").hexdigest(), b"code")
    foreign = {"important.o": b"\x7fELF user's object", "libfoo.o": b"\x7fELF",
               "0" * 64 + ".o": b"\x7fELF a tracegrad name, another header",
               ".tmp-abcdefgh.o": b"not a tracegrad temporary file", "notes.txt": b"keep",
               "cuda/" + "1" * 64 + ".py": b"import os  # not generated by tracegrad",
               "cuda/__pycache__/" + "2" * 64 + ".k-2.py311.nbc": b"not a pickle"}
    for name, data in foreign.items():
        (cache_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (cache_dir / name).write_bytes(data)
        old = os.path.getmtime(cache_dir / name) - 2 * cache.STALE_TEMP_SECONDS
        os.utime(cache_dir / name, (old, old))
    monkeypatch.setenv("TRACEGRAD_CACHE_SIZE", "0")
    cache.prune()
    for name, data in foreign.items():
        assert (cache_dir / name).read_bytes() == data, name
    assert _entries(cache_dir) == sorted(n for n in foreign if n.endswith(".o") and not n.startswith("."))


@ROOT_ONLY
def test_prune_leaves_another_users_files(cache_dir):
    (path,) = _ours(cache_dir, "theirs", 100, 100)
    os.chown(path, OTHER_UID, -1)
    cache.prune(0)
    assert path.exists()


def test_failed_writes_leave_no_temporary_file(cache_dir, monkeypatch):
    def fail(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", fail)
    with pytest.warns(RuntimeWarning, match="cannot write"):
        cache.store("d" * 64, b"code")
    with pytest.raises(OSError):
        build._write(build.module_text(KERNEL), "e" * 64)

    def interrupted(src, dst):
        raise KeyboardInterrupt
    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cache.store("d" * 64, b"code")
    left = [os.path.join(r, n) for r, _, names in os.walk(cache_dir) for n in names if n.startswith(".tmp")]
    assert left == [] and _entries(cache_dir) == []


def test_cuda_kernels_count_toward_the_cap(cache_dir):
    cuda = os.path.dirname(cache.private(cache.CUDA, "__pycache__"))
    ages = {"k1": 0, "o1": 10, "k2": 20, "o2": 30, "k3": 40}           # k: a cuda kernel; o: an object file
    files = {n: _ours(pathlib.Path(cuda) if n[0] == "k" else cache_dir, n, 1000, age) for n, age in ages.items()}
    kept = cache.prune(3500)
    survivors = {name for name, paths in files.items() if all(p.exists() for p in paths)}
    assert survivors == {"k1", "o1"} and kept <= 3500
    assert all(not p.exists() for name in files.keys() - survivors for p in files[name])   # whole or nothing


def test_an_entry_of_an_older_format_is_a_quiet_miss(cache_dir, compiles):
    _run(2.0)
    (name,) = _entries(cache_dir)
    payload = (cache_dir / name).read_bytes()[len(cache.MAGIC) + 64:]
    (cache_dir / name).write_bytes(b"TGOBJ1\n" + hashlib.sha256(payload).hexdigest().encode() + payload)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _run(2.0).stats()["disk_hits"] == 0 and len(compiles) == 2
        assert _run(2.0).stats()["disk_hits"] == 1                  # rewritten in this format
