"""The machine-dependent thresholds of CPU code generation, in one place: `value(name)`.

    TRACEGRAD_CALIBRATION=on    (the default) measured on first use per CPU model, target
                                (TRACEGRAD_CPU) and thread count (calibrate.py, well under a second),
                                then read back from `<cache dir>/calibration-<key>.json`
    TRACEGRAD_CALIBRATION=off   the documented defaults below (FIELDS): the same code on every machine
                                (the tests and CI use it)
    TRACEGRAD_THRESHOLDS=tile=64,stream_min_bytes=1M   values set by hand, over either of those

A calibration file is trusted only when this user wrote it (lowering/cache.py's rules: owned by this
user, not writable by others, a regular file, in the private cache directory); a foreign, corrupt or
oversized file, or one of another key or version, is ignored with a warning and re-measured. Values
read back are clamped to the field's calibrated range; values set by hand to its legal range (what
the code generator can emit at all), so tests can force every strategy. Files are written whole
through a temporary file and renamed into place: two processes calibrating at once both write a
complete file. `fingerprint()`, the values that shape generated code, is part of every disk cache
key (engine.target_id), so a kernel compiled under other thresholds is never reused.

Chosen at run time from measured cost instead: whether a split kernel's chunks run on the worker
threads or on the calling thread alone (judge.Judge, per kernel, from its own times).
"""
import contextlib
import hashlib
import json
import os
import re
import warnings
from collections import namedtuple

from ...lowering import cache
from . import calibrate, forksafe, host

VERSION = 1
MAX_FILE_BYTES = 16384        # a file is ~1.5 KB, most of it the target's feature list
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}

# default: the value with calibration off; lo..hi: what a calibration may give; legal_lo..legal_hi,
# in steps of `step`: what TRACEGRAD_THRESHOLDS may set; code: whether it shapes generated code
Field = namedtuple("Field", "default lo hi legal_lo legal_hi step code reader meaning")
FIELDS = {
    "parallel_min_work": Field(1 << 20, 1 << 16, 1 << 24, 1, 1 << 40, 1, True, "regions",
                               "element-ops of a kernel split over the thread pool"),
    "stream_min_bytes": Field(4 << 20, 1 << 20, 1 << 28, 1, 1 << 40, 1, True, "plan",
                              "bytes of a fresh output written with streaming (non-temporal) stores"),
    "tile": Field(32, 32, 64, 32, 128, 32, True, "plan",
                  "elements per side of a transpose tile"),
    "across_tile": Field(256, 128, 1024, 64, 4096, 64, True, "plan",
                         "kept-axis elements per vector of partial results (sums across rows)"),
    "scratch_limit": Field(8192, 2048, 16384, 1, 32768, 1, True, "rowcache",
                           "elements of a row kept in a per-thread scratch buffer"),
    "online_block": Field(2048, 512, 8192, 128, 65536, 128, True, "online",
                          "elements of a row walked twice in L1 (online softmax)"),
    "block_bytes": Field(1 << 20, 256 << 10, 8 << 20, 1, 1 << 30, 1, True, "online_columns",
                         "bytes of a tile's rows walked twice in cache (online column walk)"),
    "hoist_bytes": Field(1 << 16, 16 << 10, 256 << 10, 0, 1 << 20, 1, True, "hoist",
                         "stack bytes of a kernel's per-column arrays"),
    "spin_budget": Field(20000, 1000, 1 << 20, 0, 1 << 30, 1, False, "threads",
                         "pause iterations (about a millisecond) a worker spins before it sleeps"),
}

_LOCK = forksafe.lock()
_VALUES = {}        # (mode, TRACEGRAD_THRESHOLDS, target spec, threads) -> {name: value}
_reported = set()


def value(name):
    """The threshold `name` (a key of FIELDS) for the target compiled for now."""
    return current()[name]


def current():
    """{name: value} of every threshold for the current target, mode and hand-set values."""
    state = (mode(), os.environ.get("TRACEGRAD_THRESHOLDS", ""), os.environ.get("TRACEGRAD_CPU", ""),
             os.environ.get("TRACEGRAD_THREADS", ""))
    values = _VALUES.get(state)
    if values is None:
        with _LOCK:
            values = _VALUES.get(state)
            if values is None:
                base = defaults() if state[0] == "off" else calibrated()[0]
                values = _VALUES[state] = {**base, **hand_set(state[1])}
    return values


def fingerprint():
    """The values that shape generated code, as text for the disk cache key."""
    values = current()
    return ",".join(f"{name}={values[name]}" for name, f in FIELDS.items() if f.code)


@contextlib.contextmanager
def override(**values):
    """TRACEGRAD_THRESHOLDS with `values` set over it while the block runs (tests, the streaming bench)."""
    saved = os.environ.get("TRACEGRAD_THRESHOLDS")
    text = ",".join(f"{k}={v}" for k, v in {**hand_set(saved or ""), **values}.items())
    hand_set(text)
    os.environ["TRACEGRAD_THRESHOLDS"] = text
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TRACEGRAD_THRESHOLDS", None)
        else:
            os.environ["TRACEGRAD_THRESHOLDS"] = saved


def mode():
    text = os.environ.get("TRACEGRAD_CALIBRATION", "").strip().lower() or "on"
    if text not in ("on", "off"):
        raise ValueError(f"TRACEGRAD_CALIBRATION={text!r}: write on (measure this machine once, the default) or off "
                         f"(the documented defaults, the same on every machine)")
    return text


def defaults():
    return {name: f.default for name, f in FIELDS.items()}


def hand_set(text):
    """{name: value} of TRACEGRAD_THRESHOLDS (name=value pairs, sizes with an optional K, M or G)."""
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, _, raw = item.partition("=")
        name, m = name.strip(), re.fullmatch(r"(\d+)\s*([KMG]?)", raw.strip(), re.IGNORECASE)
        f = FIELDS.get(name)
        if f is None or not m:
            raise ValueError(f"TRACEGRAD_THRESHOLDS: {item!r} is not name=value with a name of "
                             f"{', '.join(FIELDS)} and a whole number (K, M, G suffixes allowed)")
        v = int(m.group(1)) * _UNITS[m.group(2).upper()]
        if not (f.legal_lo <= v <= f.legal_hi and v % f.step == 0):
            raise ValueError(f"TRACEGRAD_THRESHOLDS: {name}={v} is outside what the code generator can use: "
                             f"{f.legal_lo}..{f.legal_hi}" + (f" in steps of {f.step}" if f.step > 1 else ""))
        out[name] = v
    return out


def clamp(values):
    """Every field of `values` (ints; a missing one is the default) within its calibrated range and step."""
    out = {}
    for name, f in FIELDS.items():
        v = min(max(int(values.get(name, f.default)), f.lo), f.hi)
        out[name] = v - v % f.step
    return out


def key():
    """What a calibration depends on: the CPU model, the target's CPU and features, the threads."""
    t = host.current()
    text = f"v{VERSION}|{_cpu_model()}|{t.cpu}|{t.features}|threads {calibrate.threads()}"
    return text, hashlib.sha256(text.encode()).hexdigest()[:24]


def path():
    """The calibration file of this key, or None where the cache directory is not private."""
    d = cache.private()
    return None if d is None else os.path.join(d, f"calibration-{key()[1]}.json")


def calibrated(remeasure=False):
    """(values, facts, measured now): read back from this key's file, else measured and written."""
    text, _ = key()
    where = path()
    if where is not None and not remeasure:
        found = _read(where, text)
        if found is not None:
            return clamp(found["values"]), found["facts"], False
    facts = calibrate.measure()
    values = clamp(calibrate.derive(facts))
    if where is not None:
        data = json.dumps({"version": VERSION, "key": text, "values": values, "facts": facts}, indent=1)
        try:
            cache.write_new(os.path.dirname(where), where, data.encode(), "json")
        except OSError as e:
            _warn(where, f"cannot write the calibration file {where}: {e}; measured again next process")
    if remeasure:
        _VALUES.clear()                 # the next compile reads the new values
    return values, facts, True


def describe(remeasure=False):
    """What `python -m tracegrad calibrate` prints: the facts measured, each threshold in use, its
    default, range and reader (measured again first with `remeasure`, unless calibration is off)."""
    t, lines = host.current(), []
    head = f"machine: {_cpu_model()}, target {t.cpu} ({t.vector_bytes}-byte vectors), {calibrate.threads()} threads"
    if mode() == "off":
        lines += [head, "TRACEGRAD_CALIBRATION=off: the documented defaults"]
    else:
        _, facts, now = calibrated(remeasure)
        lines += [head, f"{'measured now' if now else 'read back'}: {path() or '(no private cache directory)'}",
                  f"facts: L1d {facts['l1d'] >> 10} KiB, L2 {facts['l2'] >> 10} KiB, last level {facts['llc'] >> 10} KiB "
                  f"(from {facts['caches_from']}); thread wake {facts['wake_ns'] / 1e3:.1f} us, element-op "
                  f"{facts['element_ns']:.3f} ns, pause {facts['pause_ns']:.1f} ns; measured in {facts['seconds']} s"]
    values, hand = current(), hand_set(os.environ.get("TRACEGRAD_THRESHOLDS", ""))
    lines.append(f"{'threshold':<18} {'value':>10} {'default':>10} {'calibrated range':>20}  read by: meaning")
    for name, f in FIELDS.items():
        mark = " (TRACEGRAD_THRESHOLDS)" if name in hand else ""
        lines.append(f"{name:<18} {values[name]:>10} {f.default:>10} {f'{f.lo}..{f.hi}':>20}  {f.reader}: {f.meaning}{mark}")
    lines.append("chosen at run time: a split kernel on the worker threads or the calling thread alone (judge.Judge)")
    return "\n".join(lines)


def _read(where, text):
    """The file's dict when it is this user's, whole, of this key and version; None (warned) otherwise."""
    if not os.path.lexists(where) or not cache.trusted([where]):
        return None
    try:
        with open(where, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise ValueError(f"over {MAX_FILE_BYTES} bytes")
        data = json.loads(raw)
        if not (isinstance(data, dict) and data.get("version") == VERSION and data.get("key") == text
                and isinstance(data.get("values"), dict) and isinstance(data.get("facts"), dict)
                and all(type(data["values"].get(n)) is int for n in FIELDS)):
            raise ValueError("not a calibration of this machine and version")
    except (OSError, ValueError) as e:
        _warn(where, f"ignoring the calibration file {where} ({e}); measuring this machine again")
        return None
    return data


def _cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return host.current_native().cpu


def _warn(where, message):
    if where not in _reported:
        _reported.add(where)
        warnings.warn(f"tracegrad: {message}", RuntimeWarning, stacklevel=3)
