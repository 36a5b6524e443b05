"""Which CPU compiled code is built for: TRACEGRAD_CPU, read at each compile.

    TRACEGRAD_CPU=native               the host's CPU and features (the default)
    TRACEGRAD_CPU=x86-64-v3            an LLVM CPU name: AVX2 and FMA, no AVX-512
    TRACEGRAD_CPU=+avx2,+fma,-avx512f  the host's features changed (LLVM clears what depends on one)
    TRACEGRAD_CPU=skylake,-avx512f     a CPU name and changes

so that code for an AVX2 machine can be built, checked and timed on an AVX-512 one. The target's
CPU and features are part of every disk cache key (engine.target_id), and code generation reads
the vector width from the target (`vector_bytes`), never from the host. Code already compiled in a
process stays as it was built; a new compile uses the target named then. The code runs here, so a
target with features the host lacks is refused (_check_runs_here)."""
import os
import subprocess
import sys
import tempfile
import threading
from collections import namedtuple
from contextlib import contextmanager

import llvmlite.binding as llvm

from . import forksafe

NATIVE = "native"
_LOCK = forksafe.lock()
_TARGETS = {}        # TRACEGRAD_CPU's text -> Target
_ACCEPTED = []       # (CPU names, feature names) LLVM knows for this machine's architecture
_PINNED = threading.local()     # .spec: the TRACEGRAD_CPU text `pinned` holds in this thread


class Target(namedtuple("Target", "spec cpu features machine vector_bytes")):
    """A resolved TRACEGRAD_CPU: `machine` optimizes and emits code (shared); `new_machine()` gives
    each JIT engine its own."""

    def new_machine(self):
        return _machine(self.cpu, self.features)


def current():
    """The Target that TRACEGRAD_CPU names now (resolved once per distinct value)."""
    spec = getattr(_PINNED, "spec", None) or os.environ.get("TRACEGRAD_CPU", "").strip() or NATIVE
    t = _TARGETS.get(spec)
    if t is None:
        with _LOCK:
            t = _TARGETS.get(spec) or _TARGETS.setdefault(spec, _resolve(spec))
    return t


@contextmanager
def pinned(spec):
    """Within it, in this thread, current() is the target TRACEGRAD_CPU=`spec` names, whatever the
    variable says now: IR generated for one target and compiled later (Program.steps, the module that
    profile() and check mode time kernel by kernel) is built for the target it was written for. Its
    IR differs by target (exp's llvm.ldexp is vscalefps with AVX-512, a call per element without)."""
    saved = getattr(_PINNED, "spec", None)
    _PINNED.spec = spec
    try:
        yield
    finally:
        _PINNED.spec = saved


def vector_bytes():
    """Bytes in the target's widest vector register: 64 with AVX-512, 32 with AVX, 16 otherwise
    (SSE, NEON). Shuffles written wider than the registers are split by LLVM into many
    cross-register shuffles, slow to compile and to run (a 16 x 16 float32 register transpose on an
    AVX2 host: 0.47 s of instruction selection for one kernel, 13x the 8 x 8 one)."""
    return current().vector_bytes


def initialize():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


def _resolve(spec):
    initialize()
    items = [s.strip() for s in spec.split(",") if s.strip()]
    names = [s for s in items if s[0] not in "+-"]
    changes = [s for s in items if s[0] in "+-"]
    if len(names) > 1:
        raise ValueError(f"TRACEGRAD_CPU={spec!r} names {len(names)} CPUs ({', '.join(names)}); name at most one, "
                         f"then features to add or remove, e.g. x86-64-v3 or skylake,-avx512f or +avx2,+fma,-avx512f")
    name = names[0] if names else NATIVE
    if name == NATIVE:
        cpu, base = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    else:
        cpu, base = name, ""
    if name != NATIVE or changes:
        cpus, features = _accepted()
        if name != NATIVE and name not in cpus:
            raise ValueError(f"TRACEGRAD_CPU={spec!r}: {name!r} is not a CPU LLVM knows for this machine's "
                             f"architecture ({llvm.get_default_triple()}); accepted: native (the host, "
                             f"{llvm.get_host_cpu_name()}) or one of {', '.join(sorted(cpus))}")
        unknown = [c for c in changes if c[1:] not in features]
        if unknown:
            raise ValueError(f"TRACEGRAD_CPU={spec!r}: {', '.join(repr(c[1:]) for c in unknown)} "
                             f"{'is not a feature' if len(unknown) == 1 else 'are not features'} LLVM knows for "
                             f"this machine's architecture; write +name to add or -name to remove one of "
                             f"{', '.join(sorted(features))}")
    features = ",".join(filter(None, [base, *changes]))
    machine = _machine(cpu, features)
    target = Target(spec, cpu, features, machine, _widest_vector(machine))
    if name != NATIVE or changes:
        _check_runs_here(target, changes)
    return target


def slow_gathers():
    """Whether the target's vector gathers are slow on this host: AVX-512 code on AMD Zen (znver4 and
    later), whose gathers LLVM's cost model takes to be cheap (the planner's `limits.gathers`)."""
    return llvm.get_host_cpu_name().startswith("znver") and "+avx512f" in current().features.split(",")


def no_gathers(strategy):
    """The function attributes of a kernel whose Strategy rules out vector gathers and scatters: the
    target's features and LLVM's prefer-no-gather, prefer-no-scatter; "" for the others."""
    if strategy.gathers:
        return ""
    return f' "target-features"="{current().features},+prefer-no-gather,+prefer-no-scatter"'


def _check_runs_here(target, changes):
    """Compiled code runs in this process: a target with features the host lacks (one it names, or
    vectors wider than the host's) would stop it with an illegal instruction, so it is refused.
    LLVM's tuning flags (prefer-*: no instructions, choices among them) are never lacking."""
    host = llvm.get_host_cpu_features()
    lacking = [c[1:] for c in changes if c[0] == "+" and not c[1:].startswith("prefer-")
               and not host.get(c[1:], False)]
    native = current_native().vector_bytes
    if lacking or target.vector_bytes > native:
        what = (f"features this CPU lacks ({', '.join(lacking)})" if lacking else
                f"{target.vector_bytes}-byte vectors, wider than this CPU's {native}")
        raise ValueError(f"TRACEGRAD_CPU={target.spec!r} builds code with {what}: compiled code runs on this "
                         f"machine ({llvm.get_host_cpu_name()}), which would stop at its first such "
                         f"instruction; name a CPU this one can stand in for (native, x86-64-v3, ...)")


def current_native():
    """The host's own Target (TRACEGRAD_CPU=native)."""
    t = _TARGETS.get(NATIVE)
    if t is None:
        t = _TARGETS.setdefault(NATIVE, _resolve(NATIVE))
    return t


def _machine(cpu, features):
    return llvm.Target.from_default_triple().create_target_machine(cpu=cpu, features=features, opt=3, jit=True)


_HELP = ("import llvmlite.binding as llvm; llvm.initialize_native_target(); "
         "llvm.Target.from_default_triple().create_target_machine(cpu='help')")


def _accepted():
    """(CPU names, feature names) as LLVM lists them for `cpu=help` (it writes them to stderr). LLVM
    prints that listing once per process: where something else in this process asked first (another
    copy of tracegrad, as bench.ab loads), a child process lists them."""
    if not _ACCEPTED:
        text = _stderr_of(lambda: llvm.Target.from_default_triple().create_target_machine(cpu="help"))
        if "Available features for this target:" not in text:
            text = subprocess.run([sys.executable, "-c", _HELP], capture_output=True, text=True).stderr
        cpus_part, _, features_part = text.partition("Available features for this target:")
        _ACCEPTED.append((_names(cpus_part), _names(features_part)))
    return _ACCEPTED[0]


def _names(listing):
    """The first words of the `  name  - description` lines of an LLVM help listing."""
    return frozenset(line.split()[0] for line in listing.splitlines()
                     if line.startswith("  ") and " - " in line and line.split()[0] != "-")


def _stderr_of(fn):
    """What fn writes to file descriptor 2 (LLVM's own stream) while it runs."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            fn()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        return tmp.read().decode("utf-8", "replace")


_PROBE = """define void @probe(ptr %p) #0 {
  %v = load <16 x float>, ptr %p, align 4
  %w = fadd <16 x float> %v, %v
  store <16 x float> %w, ptr %p, align 4
  ret void
}
attributes #0 = { "prefer-vector-width"="512" "min-legal-vector-width"="512" }
"""


def _widest_vector(machine):
    """The target's widest vector register in bytes, from the registers the machine's code for a
    16-float add uses."""
    asm = machine.emit_assembly(llvm.parse_assembly(_PROBE))
    return 64 if "zmm" in asm else 32 if "ymm" in asm else 16
