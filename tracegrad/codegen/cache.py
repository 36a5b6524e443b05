"""The disk cache of compiled object code (TRACEGRAD_CACHE_DIR, default ~/.cache/tracegrad).

Entries are `<sha256>.o` with a header holding a checksum of the payload; writes go to a temporary
file renamed into place (atomic, so concurrent writers never leave a torn file). A truncated or
corrupt entry is reported once, deleted and rebuilt — never fatal."""
import hashlib
import os
import tempfile
import warnings

MAGIC = b"TGOBJ1\n"
_reported = set()


def directory():
    return os.environ.get("TRACEGRAD_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tracegrad")


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
    except OSError as e:
        warnings.warn(f"tracegrad: cannot write the compiled-code cache in {d}: {e}", RuntimeWarning, stacklevel=2)
