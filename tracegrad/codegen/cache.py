"""The disk cache of compiled object code (TRACEGRAD_CACHE_DIR, default ~/.cache/tracegrad).

Entries are `<sha256>.o` with a header holding a checksum of the payload; writes go to a temporary
file renamed into place (atomic, so concurrent writers never leave a torn file). A truncated or
corrupt entry is reported once, deleted and rebuilt — never fatal.

The cache holds at most TRACEGRAD_CACHE_SIZE bytes (default 1G; a number of bytes with an optional
K, M, G or T suffix; 0 keeps nothing). After each write, the least recently used entries (oldest
modification time; a load touches its entry) are deleted until the rest fits, and temporary files
that writers left behind more than an hour ago go too. Several processes may write and prune at
once: an entry is deleted whole or not at all, a reader that loses an entry it was about to read
rebuilds it, and a reader never sees a partial one.
"""
import hashlib
import os
import re
import tempfile
import time
import warnings

MAGIC = b"TGOBJ1\n"
DEFAULT_SIZE = 1 << 30
STALE_TEMP_SECONDS = 3600
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_reported = set()


def directory():
    return os.environ.get("TRACEGRAD_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tracegrad")


def max_size():
    """The cap in bytes: TRACEGRAD_CACHE_SIZE (e.g. 500M, 2G, 100000), default DEFAULT_SIZE."""
    text = os.environ.get("TRACEGRAD_CACHE_SIZE", "").strip()
    if not text:
        return DEFAULT_SIZE
    m = re.fullmatch(r"(\d+(?:\.\d*)?)\s*([KMGT]?)(?:i?B)?", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"TRACEGRAD_CACHE_SIZE={text!r} is not a size: write a number of bytes with an optional "
                         f"K, M, G or T suffix, e.g. 500M or 2G (0 keeps no compiled code on disk)")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def _path(key):
    return os.path.join(directory(), key + ".o")


def load(key):
    path = _path(key)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    head = len(MAGIC) + 64
    if data[:len(MAGIC)] == MAGIC and len(data) > head:
        digest, payload = data[len(MAGIC):head].decode("ascii", "replace"), data[head:]
        if hashlib.sha256(payload).hexdigest() == digest:
            try:
                os.utime(path)              # recently used: pruned last
            except OSError:
                pass
            return payload
    if path not in _reported:
        _reported.add(path)
        warnings.warn(f"tracegrad: corrupt compiled-code cache entry {path} (truncated or damaged); rebuilding it",
                      RuntimeWarning, stacklevel=2)
    try:
        os.remove(path)
    except OSError:
        pass
    return None


def store(key, payload):
    d = directory()
    try:
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".o")
        with os.fdopen(fd, "wb") as fh:
            fh.write(MAGIC + hashlib.sha256(payload).hexdigest().encode("ascii") + payload)
        os.replace(tmp, _path(key))
        prune()
    except OSError as e:
        warnings.warn(f"tracegrad: cannot write the compiled-code cache in {d}: {e}", RuntimeWarning, stacklevel=2)


def prune(limit=None):
    """Delete the least recently used entries until the cache holds at most `limit` bytes (default
    max_size()), and temporary files older than STALE_TEMP_SECONDS; returns the bytes kept."""
    limit = max_size() if limit is None else limit
    entries, now = [], time.time()
    try:
        with os.scandir(directory()) as it:
            for e in it:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:             # deleted meanwhile by another process
                    continue
                if e.name.startswith(".tmp-"):
                    if now - st.st_mtime > STALE_TEMP_SECONDS:
                        _remove(e.path)
                elif e.name.endswith(".o") and e.is_file(follow_symlinks=False):
                    entries.append((st.st_mtime_ns, e.name, st.st_size, e.path))
    except OSError:
        return 0
    total = sum(size for _, _, size, _ in entries)
    for _, _, size, path in sorted(entries):       # oldest first
        if total <= limit:
            break
        _remove(path)
        total -= size
    return total


def _remove(path):
    try:
        os.remove(path)
    except OSError:                     # already gone (another pruner) or not ours to remove
        pass
