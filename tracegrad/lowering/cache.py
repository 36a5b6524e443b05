"""The disk cache of compiled object code (TRACEGRAD_CACHE_DIR, default ~/.cache/tracegrad).

Entries are `<sha256>.o` with a header holding an HMAC-SHA256 of the payload under this user's
secret key; writes go to a temporary file renamed into place (atomic, so concurrent writers never
leave a torn file; a failed write removes its temporary file). A truncated or corrupt entry, or
one signed with another key, is reported once, deleted and rebuilt — never fatal.

The cache runs code, so it is private: the directory is made with mode 0700 whatever the umask,
and a directory or entry owned by another user, or writable by group or others, is never loaded
from or written to (a warning names it once; code is compiled without it). The key is
`<dir>/.key` (0600, made on first use; KEY_MAGIC and 64 hex digits): an entry planted with a
computable checksum, or copied from another user's cache, fails its signature.

The cache holds at most TRACEGRAD_CACHE_SIZE bytes (default 1G; a number of bytes with an optional
K, M, G or T suffix; 0 keeps nothing), the numba.cuda kernels under `<dir>/cuda` included
(backends/cuda/compile.py: `<sha256>.py` files and numba's `__pycache__/<sha256>.*.nbi|nbc`). After
each write, the least recently used entries (oldest modification time; a load touches its entry)
are deleted until the rest fits, and temporary files that writers left behind more than an hour
ago go too. Only tracegrad's own files are ever deleted: this user's, named as above, whose
first bytes are tracegrad's header. Several processes may write and prune at once: an entry is
deleted whole or not at all, a reader that loses an entry it was about to read rebuilds it, and a
reader never sees a partial one.
"""
import hashlib
import hmac
import os
import re
import stat
import tempfile
import time
import warnings

MAGIC = b"TGOBJ2\n"
FAMILY = b"TGOBJ"                    # every version's header: an older version's entry is a quiet miss
KEY_MAGIC = b"TGKEY1\n"
CUDA = "cuda"                        # the subdirectory of numba.cuda kernels (backends/cuda/compile.py)
CUDA_MARK = b"# tracegrad: "         # the first bytes of every kernel file there
PICKLE = b"\x80"                     # the first byte of numba's index and data files
DEFAULT_SIZE = 1 << 30
STALE_TEMP_SECONDS = 3600
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_KEY = re.compile(r"[0-9a-f]{64}")
_ENTRY = re.compile(r"([0-9a-f]{64})\.o")
_KERNEL = re.compile(r"([0-9a-f]{64})\.py")
_COMPILED = re.compile(r"([0-9a-f]{64})\..*\.nb[ic]")
_TEMP = re.compile(r"\.tmp-[a-z0-9_]+\.(o|py|key)")
_TEMP_MARKS = {"o": FAMILY, "py": CUDA_MARK, "key": KEY_MAGIC}
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


def _warn_once(path, message):
    if path not in _reported:
        _reported.add(path)
        warnings.warn(f"tracegrad: {message}", RuntimeWarning, stacklevel=3)


def unsafe(st, others=0o022):
    """Why a file or directory with stat `st` might hold another user's code ('' where it cannot):
    owned by another user, or its mode has a bit of `others` (writable by group or others)."""
    if st.st_uid != os.geteuid():
        return f"owned by another user (uid {st.st_uid}, not {os.geteuid()})"
    if st.st_mode & others:
        return f"open to group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return ""


def private(*sub):
    """The cache directory, or its subdirectory `sub` (e.g. CUDA), each level made with mode 0700
    where absent; None, with a warning once naming the directory, where one cannot be made or
    is not private (unsafe): then nothing is loaded from it or written to it."""
    d = directory()
    for level, part in enumerate(("",) + sub):
        d = os.path.join(d, part) if part else d
        try:
            if level == 0:
                os.makedirs(os.path.dirname(os.path.abspath(d)), exist_ok=True)
            try:
                os.mkdir(d, 0o700)
                os.chmod(d, 0o700)              # mkdir's mode is masked by the umask
            except FileExistsError:
                pass
            st = os.stat(d)
        except OSError as e:
            _warn_once(d, f"cannot write the compiled-code cache in {d}: {e}; compiling without it")
            return None
        problem = unsafe(st) or ("" if stat.S_ISDIR(st.st_mode) else "not a directory")
        if problem:
            _warn_once(d, f"the compiled-code cache directory {d} is {problem}: nothing is loaded from it (another "
                          f"user could plant code there); compiling without the cache. Point TRACEGRAD_CACHE_DIR at "
                          f"a directory of your own with mode 0700")
            return None
    return d


def trusted(paths):
    """Whether none of `paths` (existing files or not) is unsafe; warns once naming the first that is."""
    for path in paths:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        problem = unsafe(st) or ("" if stat.S_ISREG(st.st_mode) else "not a regular file")
        if problem:
            _warn_once(path, f"the compiled-code cache entry {path} is {problem}: not loaded (another user could "
                             f"have planted it); compiling without it")
            return False
    return True


def _secret(d):
    """This user's signing key: `<d>/.key` (0600), made on first use; None (warned) where unusable."""
    path = os.path.join(d, ".key")
    if not os.path.lexists(path):
        write_new(d, path, KEY_MAGIC + os.urandom(32).hex().encode("ascii"), "key", replace=False)
    if not trusted([path]):
        return None
    with open(path, "rb") as fh:
        st, data = os.fstat(fh.fileno()), fh.read(256)
    problem = unsafe(st, 0o077) or ("" if len(data) == len(KEY_MAGIC) + 64 and data.startswith(KEY_MAGIC)
                                    else "not a tracegrad key")
    if problem:
        _warn_once(path, f"the compiled-code cache key {path} is {problem}: the cache is not used; delete the file "
                         f"to make a new key")
        return None
    return data[len(KEY_MAGIC):]


def _sign(secret, payload):
    return hmac.new(secret, payload, hashlib.sha256).hexdigest().encode("ascii")


def write_new(d, path, data, kind, replace=True):
    """Write `data` to `path` through a temporary file of `d` (removed whatever happens); without
    `replace`, a file another process put at `path` meanwhile stays."""
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix="." + kind)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
    finally:
        _remove(tmp)


def _path(d, key):
    if not _KEY.fullmatch(key):
        raise ValueError(f"a cache key is a SHA-256 in hex, not {key!r}")
    return os.path.join(d, key + ".o")


def load(key):
    d = private()
    if d is None:
        return None
    path = _path(d, key)
    if not os.path.lexists(path) or not trusted([path]):
        return None
    try:
        secret = _secret(d)
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:                         # pruned meanwhile: a miss
        return None
    if secret is None:
        return None
    head = len(MAGIC) + 64
    if data.startswith(MAGIC) and len(data) > head and hmac.compare_digest(data[len(MAGIC):head],
                                                                            _sign(secret, data[head:])):
        try:
            os.utime(path)                  # recently used: pruned last
        except OSError:
            pass
        return data[head:]
    if not data.startswith(FAMILY) or data.startswith(MAGIC):
        _warn_once(path, f"corrupt compiled-code cache entry {path} (truncated or damaged, or signed with another "
                         f"key); rebuilding it")
    _remove(path)
    return None


def store(key, payload):
    d = private()
    if d is None:
        return
    try:
        secret = _secret(d)
        if secret is not None:
            data = MAGIC + _sign(secret, payload) + payload
            write_new(d, _path(d, key), data, "o")
            _prune_when_due(d, len(data))
    except OSError as e:
        warnings.warn(f"tracegrad: cannot write the compiled-code cache in {d}: {e}", RuntimeWarning, stacklevel=2)


PRUNE_EVERY = 64     # stores between full prunes while this process's count of the bytes stays under the cap
_kept = {}           # directory -> [bytes the last prune kept plus those stored since, stores since]


def _prune_when_due(d, size):
    """prune() after a store, when this process's running count of the cache's bytes passes the cap, or on
    its first store, or every PRUNE_EVERY stores (other processes write too): a prune scans the whole
    directory, and a scan per compile cost ~0.2 s once the cache held a few thousand entries."""
    count = _kept.get(d)
    if count is not None and count[0] + size <= max_size() and count[1] + 1 < PRUNE_EVERY:
        count[0] += size
        count[1] += 1
        return
    _kept[d] = [prune(), 0]


def _scan(d):
    """{name: stat} of the regular files of this user in `d` ({} where it is absent)."""
    out = {}
    try:
        with os.scandir(d) as it:
            for e in it:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:             # deleted meanwhile by another process
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                    out[e.name] = st
    except OSError:
        pass
    return out


def _begins(path, mark, partial=False):
    """Whether the file begins with `mark` (`partial`: with as much of it as the file has)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(mark))
    except OSError:
        return False
    return mark.startswith(head) if partial else head == mark


_ORDER = {"nbi": 0, "nbc": 1, "o": 1, "py": 2}      # an entry's index goes first and a kernel's source last


def prune(limit=None):
    """Delete the least recently used entries (object files and cuda kernels) until the cache holds
    at most `limit` bytes (default max_size()), and temporary files older than STALE_TEMP_SECONDS;
    returns the bytes kept."""
    limit = max_size() if limit is None else limit
    d = private()
    if d is None:
        return 0
    groups, now = {}, time.time()           # (kind, key): [(path, stat, mark)]
    for folder, pattern, mark in ((d, _ENTRY, FAMILY), (os.path.join(d, CUDA), _KERNEL, CUDA_MARK),
                                  (os.path.join(d, CUDA, "__pycache__"), _COMPILED, PICKLE)):
        for name, st in _scan(folder).items():
            path, m, tmp = os.path.join(folder, name), pattern.fullmatch(name), _TEMP.fullmatch(name)
            if m:
                groups.setdefault((mark is FAMILY, m.group(1)), []).append((path, st, mark))
            elif tmp and now - st.st_mtime > STALE_TEMP_SECONDS and _begins(path, _TEMP_MARKS[tmp.group(1)], True):
                _remove(path)
    entries = sorted((max(st.st_mtime_ns for _, st, _ in files), key, files) for key, files in groups.items())
    total = sum(st.st_size for _, _, files in entries for _, st, _ in files)
    for _, _, files in entries:             # oldest first
        if total <= limit:
            break
        if all(_begins(path, mark) for path, _, mark in files):
            for path, _, _ in sorted(files, key=lambda f: _ORDER[f[0].rsplit(".", 1)[1]]):
                _remove(path)
        total -= sum(st.st_size for _, st, _ in files)     # deleted, or not tracegrad's: not counted
    return total


def _remove(path):
    try:
        os.remove(path)
    except OSError:                     # already gone (another pruner) or not ours to remove
        pass
