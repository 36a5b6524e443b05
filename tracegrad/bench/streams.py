"""What this machine's memory system gives a workload: its passes over memory, streamed over buffers of its
own sizes, timed (floor.py's bandwidth floor).

A workload's `Traffic` is the arrays it must read and write (float32, `n` elements each: inputs, outputs, and
an input read twice where one pass cannot do the work, W7) as a list of passes; its bytes are the sum over the
passes. The streams run those passes, in order, over buffers of the workload's sizes (or, `beyond_l3`, over
arrays far larger than the last-level cache, to show what memory itself gives): each pass sums its reads into
each of its writes, or into a register where it writes nothing. Written with LLVM IR of 64-byte vectors (one
cache line), compiled as written for this machine (engine.glue_engine), each pass in two forms: normal stores
and non-temporal ones (a write that skips the read for ownership, as tracegrad's streamed outputs do), and run
on 1 and on 2.. threads (numba's prange over the chunks of each pass, each chunk one call of the compiled
loop, so the threading is not tracegrad's own). The best of `rounds` timed calls of each form, after one call
that warms the buffers: a floor is what the machine can do, and a slow round says only that something else
ran."""
import ctypes
import functools
import os
import time
from dataclasses import dataclass

import numpy as np

LANES = 16                  # float32 per vector: 64 bytes, one cache line
UNROLL = 4
STEP = UNROLL * LANES       # elements per loop iteration: a Traffic's n is a multiple of it
ITEM = 4                    # bytes per float32
L3_FALLBACK = 32 << 20


@dataclass(frozen=True)
class Pass:
    reads: tuple            # array names read in this pass
    writes: tuple = ()      # array names written


@dataclass(frozen=True)
class Traffic:
    """The arrays a workload must move: `passes` over arrays of `n` float32 each."""
    n: int
    passes: tuple

    @property
    def nbytes(self):
        return sum(len(p.reads) + len(p.writes) for p in self.passes) * self.n * ITEM

    @property
    def arrays(self):
        return sorted({a for p in self.passes for a in p.reads + p.writes})

    def describe(self):
        return " then ".join(f"read {'+'.join(p.reads)}" + (f", write {'+'.join(p.writes)}" if p.writes else "")
                             for p in self.passes) + f" ({self.n * ITEM / 1e6:.1f} MB each)"


def last_level_cache(root="/sys/devices/system/cpu/cpu0/cache"):
    """Bytes of the largest cache cpu0 sees (sysfs), or L3_FALLBACK where sysfs does not say."""
    best = 0
    try:
        for index in os.listdir(root):
            if index.startswith("index"):
                with open(os.path.join(root, index, "size")) as fh:
                    text = fh.read().strip()
                scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
                best = max(best, int(text.rstrip("KMG")) * scale)
    except (OSError, ValueError):
        pass
    return best or L3_FALLBACK


def beyond_l3(traffic, factor=4):
    """The same passes over arrays each `factor` times the last-level cache (or the workload's own, if larger)."""
    n = max(traffic.n, -(-factor * last_level_cache() // ITEM) // STEP * STEP)
    return Traffic(n, traffic.passes)


def _loop_ir(name, reads, writes, nontemporal):
    """void name(i64 ptrs..., i64 lo, i64 hi, i64 sink): for each 64-byte vector i in [lo, hi) sum the reads;
    store it to each write (non-temporal or not), or, with no writes, add it to one of UNROLL accumulators
    (one alone would make the pass wait on its adds, not on memory), their sum stored to sink. lo and hi
    are multiples of STEP elements."""
    v = f"<{LANES} x float>"
    args = ", ".join(f"i64 %{p}" for p in [f"p{i}" for i in range(reads + writes)] + ["lo", "hi", "sink"])
    body = [f"%a{i} = inttoptr i64 %p{i} to ptr" for i in range(reads + writes)]
    body += ["br label %loop", "loop:", "%i = phi i64 [ %lo, %entry ], [ %next, %loop ]"]
    body += [f"%acc{u} = phi {v} [ zeroinitializer, %entry ], [ %acc{u}n, %loop ]" for u in range(UNROLL)]
    meta = ", !nontemporal !0" if nontemporal else ""
    for u in range(UNROLL):
        body.append(f"%i{u} = add i64 %i, {u * LANES}")
        for r in range(reads):
            body += [f"%g{r}_{u} = getelementptr float, ptr %a{r}, i64 %i{u}", f"%l{r}_{u} = load {v}, ptr %g{r}_{u}, align 64"]
        total = f"%l0_{u}"
        for r in range(1, reads):
            body.append(f"%s{r}_{u} = fadd {v} {total}, %l{r}_{u}")
            total = f"%s{r}_{u}"
        body.append(f"%acc{u}n = fadd {v} %acc{u}, " + (total if not writes else "zeroinitializer"))
        for w in range(reads, reads + writes):
            body += [f"%g{w}_{u} = getelementptr float, ptr %a{w}, i64 %i{u}", f"store {v} {total}, ptr %g{w}_{u}, align 64{meta}"]
    body += [f"%next = add i64 %i, {STEP}", "%more = icmp ult i64 %next, %hi", "br i1 %more, label %loop, label %done",
             "done:"]
    body += [f"%t{u} = fadd {v} %t{u - 1}, %acc{u}n" if u else f"%t0 = fadd {v} zeroinitializer, %acc0n" for u in range(UNROLL)]
    body += ["%out = inttoptr i64 %sink to ptr", f"store {v} %t{UNROLL - 1}, ptr %out, align 64", "ret void"]
    text = "\n  ".join(body).replace("\n  loop:", "\nloop:").replace("\n  done:", "\ndone:")
    return f"define void @{name}({args}) {{\nentry:\n  {text}\n}}\n"


@functools.lru_cache(maxsize=None)
def _kernel(reads, writes, nontemporal):
    """The numba-parallel driver of one pass form: run(ptrs int64[:], n, chunks, sink int64)."""
    import numba

    from ..backends.cpu.engine import glue_engine
    name = f"tg_stream_{reads}r{writes}w{'_nt' if nontemporal else ''}"
    text = _loop_ir(name, reads, writes, nontemporal) + ('!0 = !{i32 1}\n' if nontemporal else "")
    ee = glue_engine(text)
    proto = ctypes.CFUNCTYPE(None, *([ctypes.c_int64] * (reads + writes + 3)))
    fn = proto(ee.get_function_address(name))
    fn._engine = ee                                   # keeps the code alive with the function
    call = _caller(fn, reads + writes)

    @numba.njit(parallel=True, cache=False)
    def run(ptrs, n, chunks, sink):
        step = (n // chunks + STEP - 1) // STEP * STEP
        for c in numba.prange(chunks):
            lo = c * step
            hi = min(n, lo + step)
            if lo < hi:
                call(ptrs, lo, hi, sink + 64 * c)
    return run


def _caller(fn, k):
    """A numba function calling fn with the k pointers of an int64 array (numba calls a ctypes function with
    its arguments spelled out)."""
    import numba
    args = ", ".join(f"p[{i}]" for i in range(k))
    scope = {"fn": fn}
    exec(f"def call(p, lo, hi, sink):\n    fn({args}, lo, hi, sink)\n", scope)
    return numba.njit(cache=False)(scope["call"])


def _aligned(n):
    raw = np.ones(n + LANES, np.float32)
    start = (-raw.ctypes.data % 64) // ITEM
    return raw[start:start + n]


class Streams:
    """Buffers of one Traffic, allocated once; `best(threads, nontemporal, rounds)` times its passes."""

    def __init__(self, traffic):
        if traffic.n % STEP:
            raise ValueError(f"streams over {traffic.n} elements: a multiple of {STEP} is needed (64-byte vectors, "
                             f"{UNROLL} a loop)")
        self.traffic = traffic
        self.buffers = {a: _aligned(traffic.n) for a in traffic.arrays}
        self.sink = _aligned(64 * LANES)
        self.ptrs = [np.array([self.buffers[a].ctypes.data for a in p.reads + p.writes], np.int64)
                     for p in traffic.passes]

    def run(self, nontemporal, chunks):
        for p, ptrs in zip(self.traffic.passes, self.ptrs):
            _kernel(len(p.reads), len(p.writes), nontemporal)(ptrs, self.traffic.n, chunks, self.sink.ctypes.data)

    def best(self, threads, nontemporal, rounds):
        """Seconds of the fastest of `rounds` calls, on `threads` threads (after one untimed call)."""
        import numba
        numba.set_num_threads(threads)
        self.run(nontemporal, threads)
        best = float("inf")
        for _ in range(rounds):
            t0 = time.perf_counter()
            self.run(nontemporal, threads)
            best = min(best, time.perf_counter() - t0)
        return best


def measure(traffic, threads, rounds):
    """{(threads, "normal"|"non-temporal"): best seconds} of traffic's passes, for 1 and `threads` threads."""
    s = Streams(traffic)
    return {(t, kind): s.best(t, kind != "normal", rounds)
            for t in sorted({1, threads}) for kind in ("normal", "non-temporal")}
