"""Kernels split over the thread pool, run from a program's native segments: parallel regions.

A loop or reduce_acc kernel large enough (`splits`) runs as chunks of its outer loop, fixed by the
kernel's size alone (`chunk_plan`), never by the thread count or by which thread ran which chunk, so
results are the same on any machine and under any load. Its segment (driver.py) runs it in place,
without returning to Python: `region_call` loads the pool's shared words and its `tg_region`
function (threads.py) from the program's pointer table and hands it the chunks; `tg_region` posts
them, wakes sleeping workers (sem_post by address), claims chunks itself alongside the workers and
waits for the last. Every address (the pool, its function, the C library's, the descriptor below) is
data in the pointer table, written per process: the cached object code holds none, and a forked
child's programs point at the child's own pool (Program refreshes the slots when the pool changed).

Small kernels that read and write nothing of each other, side by side in the program (one update
per parameter tensor of an optimizer), share one region when together they are worth it (`groups`):
chunk i runs member i whole, so their results are those of a serial run; the buffer planner treats
them as one step (buffers.py), so none reuses memory another member still reads.

A kernel that accumulates over its outer loop (Kernel.partials: a reduce_acc kernel, a row kernel's
sums over rows, reductions across a unit-stride kept axis whose threads split the rows) has chunk 0
reduce into the real outputs and chunk i > 0 into row i - 1 of a private array per output, through
a private copy of the pointer table (copied natively before the job); the region's join function
then adds the partials into the outputs in chunk order: float sums in float64 with a compensated
(Neumaier) sum, so the join adds no more than half an ulp of the total; maxima, minima and integer
sums exactly. Such a kernel has at most ACC_CHUNKS chunks (an online column walk ONLINE_CHUNKS): each private
partial costs a copy of the pointer table and its share of the join on every call. An online
column walk's join rescales each chunk's sums to the joined maximum (joins.py).

Sizes known only at the call (dynamic=True): a kernel whose sizes vary (`per_call`) is compiled split
whatever the sizes it was traced at (a ragged first batch, the shortest sequence), with as many chunks
as any call may use; each call (Region.resize) cuts it as a static compile at its sizes would
(`Chunks.chunks_at`) into the descriptor's USED word: where those sizes would not split it (1), its entry
runs all its rows on the calling thread, the pool and the Judge untouched (gemm.py's `per_call` for
products); else the pool runs that many chunks, and only those chunks' partials are copied and joined
(`Chunks.counted`: the join's loop over the chunks is run-time, joins.counted_join), so that a call costs
what the static compile's at its sizes does, not the most chunks any call may use. An online column
walk's join reads every chunk (its empty chunks run, setting their partials to the walk's start). A
kernel in a shared region of small kernels at its traced sizes (`groups`) stays there: only kernels
outside such runs are split per call, so a tiny program's small kernels are grouped as statically.

Threads or the calling thread alone: each region has a descriptor (int64 words, its address in the
table): desc[0] the Judge's choice (threads.py), desc[1] the mode the region used (-1: not run since
Python last looked), desc[2] its nanoseconds, desc[3] (USED) the chunks a per-call region runs this
call (1: whole), then the chunks' pointer tables (the program's and the privates), the partials'
addresses, their element counts, where the sizes are symbolic the chunks' bounds (set per call, as
the counts are), and for a product entry shared by regions its slot record (the table's address,
then the slots it reads). After each native call, `Region.learn` hands the time to
the kernel's Judge and writes its next choice: the Judge keeps its rules and its tests, at ~1 us of
Python per region and call (a region is >= parallel_min_work element-ops (machine.py): hundreds of us).
"""
import ctypes
import math
from functools import partial

import numpy as np

from ...symint import hint
from .plan import limits
from .online_columns import _shift
from .sizes import value, varies
from .joins import USED, counted_join, join_function
from .judge import Judge
from .threads import DESC_TABLES, MAX_CHUNKS as POOL_MAX_CHUNKS

MAX_CHUNKS = 64               # chunks of one split kernel (a quarter of parallel_min_work each, at least)
ACC_CHUNKS = 16               # chunks of one that accumulates over its outer loop (see the module's text)
JOINED = ("float32", "float64", "int32", "int64")    # the dtypes a region's join adds
# chunks of an online column walk split by rows: each costs its own start (one thread, joined
# softmax over dim 0 of (2048, 1000) float32, the walk's CPU time, interleaved in one process:
# 1.47 ms in 16 chunks, 1.37 in 8, 1.19 in one; the whole call the same within noise)
ONLINE_CHUNKS = 4


def weight(kernel):
    """A loop kernel's ops per element, transcendentals (the primitive's cost) counting 8."""
    return sum(8 if cost == "transcendental" else 1 for cost in kernel.costs())


def work(kernel):
    """A rough cost of a loop kernel: elements times weight (symbolic sizes at their hints: a guess,
    which changes speed only)."""
    return math.prod(map(hint, kernel.shape)) * weight(kernel)


def per_call(kernel):
    """Whether a kernel's sizes are known only at the call (dynamic=True): whether it splits is then
    decided per call (Region.resize), since any of its symbolic sizes may make it worth it."""
    return any(map(varies, kernel.shape))


def splits(kernel, at_hints=False):
    """Whether a loop or reduce_acc kernel is compiled split over the thread pool: large enough (or of
    sizes known only at the call, its rows not one: `per_call`; with `at_hints`, large enough at its
    hints, as a static compile at the traced sizes), its partial results, if any, of a dtype the join adds."""
    extent = kernel.parallel_extent()
    big = varies(extent) or hint(extent) > 1 if per_call(kernel) and not at_hints else \
        hint(extent) > 1 and work(kernel) >= limits.parallel_min_work()
    return big and all(v.dtype.name in JOINED for ph in kernel.partials() for v, _ in ph.outputs)


def split_at_hints(kernel, slots):
    """Whether a static compile at the kernel's hints (the traced sizes) runs it split (two chunks or more)."""
    return splits(kernel, at_hints=True) and Chunks(kernel, slots).chunks_at(hint, hint(kernel.parallel_extent())) > 1


def groups(kernels, split, slots):
    """[[kernel index, ...]]: runs of consecutive small loop kernels (not in `split`) that read and
    write nothing another of the run writes (`slots`: a value's buffer slot, an in-place output its
    input's), at least two, together worth a region (parallel_min_work): each runs whole as one
    chunk of a shared region (one update per parameter tensor of an optimizer)."""
    out, run, seen = [], [], [set(), set()]         # the run's (read, written) slots

    def close():
        if len(run) >= 2 and sum(work(kernels[j]) for j in run) >= limits.parallel_min_work():
            out.append(list(run))
    for j, k in enumerate(kernels):
        if k.kind not in ("loop", "reduce_acc") or j in split:
            close()
            run, seen = [], [set(), set()]
            continue
        reads, writes = {slots[id(ld.buf)] for ld in k.reads}, {slots[id(v)] for v in k.outputs}
        if seen[1] & (reads | writes) or writes & seen[0]:
            close()
            run, seen = [], [set(), set()]
        run.append(j)
        seen[0] |= reads
        seen[1] |= writes
    close()
    return out


class Chunks:
    """How a region is cut: n chunks, their bounds, and the outputs that accumulate ([(table slot,
    Value, lowering)]); `members`: the kernels of a shared region (chunk i runs member i whole), else
    None (a split kernel's chunks of its outer loop). A kernel of sizes known only at the call
    (`per_call`) has as many chunks as any call may use; each call uses `chunks_at` of them (`Region.resize`):
    those a kernel of its sizes known when compiled would have, the others empty, or none (run whole)."""

    def __init__(self, kernel, slots, members=None):
        self.members, self.entry = members, None   # entry: its kernel's entry function (build.py)
        self.per_call = self.counted = False
        if members is not None:
            self.n, self.bounds, self.outs, self.online = len(members), list(range(len(members) + 1)), [], []
            return
        # the extent and the chunk count by its hint where symbolic: the bounds are then set per call (resize)
        self.extent = extent = kernel.parallel_extent()
        self.outs = [(slots[id(v)], v, ph.lower) for ph in kernel.partials() for v, _ in ph.outputs]
        self.counts = [math.prod(v.shape) for _, v, _ in self.outs]    # elements; symbolic: set per call (resize)
        # the space's elements (an expression where symbolic) and the threshold compiled with (read once)
        self.elements, self.weight, self.per_call = math.prod(kernel.shape), weight(kernel), per_call(kernel)
        self.least = limits.parallel_min_work()
        self.online_walk = kernel.schedule is not None and bool(kernel.schedule.online)
        self.n = min(ACC_CHUNKS if self.outs else MAX_CHUNKS, ONLINE_CHUNKS if self.online_walk else MAX_CHUNKS,
                     MAX_CHUNKS if varies(extent) else hint(extent), POOL_MAX_CHUNKS) if self.per_call else \
            self.chunks_at(hint, hint(extent))
        self.bounds = self.cut(hint(extent))
        self.online = online_joins(kernel, self.outs)
        # per call, the pool runs only the call's chunks, and only their partials are copied and joined
        self.counted = self.per_call and not self.online

    def chunks_at(self, size, extent):
        """The chunks a call whose sizes are `size(d)` (ints) and outer extent `extent` runs: 1 where it runs
        whole. About four per parallel_min_work of work; a kernel with partials at most a sixteenth of its
        space per chunk (each costs a copy and its share of the join)."""
        elements = size(self.elements)
        if self.per_call and (extent < 2 or elements * self.weight < self.least):
            return 1
        n = max(2, elements * self.weight * 4 // self.least)
        if self.outs:                     # private partials: at most a sixteenth of the input's size
            n = min(n, ACC_CHUNKS, 1 + elements // (16 * max(size(c) for c in self.counts)))
        if self.online_walk:
            n = min(n, ONLINE_CHUNKS)
        return min(n, extent, MAX_CHUNKS, POOL_MAX_CHUNKS)

    def symbolic(self):
        """Whether the bounds follow the call's sizes (Region.resize), not constants."""
        return self.members is None and (self.per_call or varies(self.extent))

    def splits_at(self, size):
        """Whether a call whose sizes are `size(d)` (ints) runs it on the pool."""
        return not self.per_call or self.chunks_at(size, size(self.extent)) > 1

    def cut(self, extent, k=None):
        """The n + 1 chunk bounds for an outer loop of `extent` (an int): k (default n) even chunks, then
        empty ones."""
        k = k or self.n
        return [extent * i // k for i in range(k + 1)] + [extent] * (self.n - k)

    def partial_word(self, i, o):
        """The descriptor word holding the address of private chunk i's (i >= 1) partial of output o."""
        return DESC_TABLES + self.n + (i - 1) * len(self.outs) + o

    def count_word(self, o):
        """The descriptor word holding output o's elements at the call (read by the join where symbolic)."""
        return DESC_TABLES + self.n + (self.n - 1) * len(self.outs) + o

    def count(self, f, o):
        """The i64 operand, in join function f (its `%desc`), of output o's elements at the call."""
        if not varies(self.counts[o]):
            return str(self.counts[o])
        return f.assign(f"load i64, ptr {f.assign(f'getelementptr i64, ptr %desc, i64 {self.count_word(o)}')}")


def bounds_word(chunks):
    """The first of the n + 1 descriptor words holding the bounds of `chunks` (a Chunks, or gemm.py's) where
    they follow the call's sizes (Region.resize): data, not a global of the module, so that the step module
    of check mode and profiles, a second copy of the code, reads the same."""
    return DESC_TABLES + chunks.n + chunks.n * len(chunks.outs)


def _load(lines, c, reg, base, index):
    """Lines loading the pointer in 8-byte word `index` of `base` into %<c><reg>; returns its name."""
    lines += [f"  %{c}{reg}p = getelementptr ptr, ptr {base}, i64 {index}", f"  %{c}{reg} = load ptr, ptr %{c}{reg}p"]
    return f"%{c}{reg}"


def region_call(c, entry, chunks, desc_slot, pool_slots, table_slots, fn=None):
    """LLVM lines (in a segment: `%table` is the program's pointer table) running kernel entry
    `@entry(table, lo, hi)` (`@fn` where given: an entry shared by regions, taking their slot record,
    see Region) as the chunks of `chunks` on the pool; registers and labels start with `c`. desc_slot:
    the table slot of the region's descriptor; pool_slots: (shared words, tg_region); table_slots: the
    pointer table's length (what a private copy copies)."""
    lines = []
    ctl = _load(lines, c, "ctl", "%table", pool_slots[0])
    run = _load(lines, c, "run", "%table", pool_slots[1])
    desc = _load(lines, c, "d", "%table", desc_slot)
    head, lines = lines, []
    lines.append(f"  %{c}tabs = getelementptr i64, ptr {desc}, i64 {DESC_TABLES}")
    for i in range(1, chunks.n) if chunks.outs and not chunks.counted else ():
        private = _load(lines, c, f"t{i}", f"%{c}tabs", i)
        lines.append(f"  call void @llvm.memcpy.p0.p0.i64(ptr {private}, ptr %table, i64 {8 * table_slots}, i1 false)")
        for o, (slot, _, _) in enumerate(chunks.outs):
            part = _load(lines, c, f"q{i}_{o}", desc, chunks.partial_word(i, o))
            lines += [f"  %{c}s{i}_{o} = getelementptr ptr, ptr {private}, i64 {slot}",
                      f"  store ptr {part}, ptr %{c}s{i}_{o}"]
    if chunks.outs and chunks.counted:
        lines += _private_tables(c, chunks, desc, table_slots)
    bounds = f"@{entry}_bounds"
    if chunks.symbolic():
        bounds = f"%{c}bounds"
        lines.append(f"  {bounds} = getelementptr i64, ptr {desc}, i64 {bounds_word(chunks)}")
    n = f"%{c}k" if chunks.counted else chunks.n
    lines.append(f"  call void {run}(ptr {ctl}, ptr @{fn or entry}, ptr %{c}tabs, ptr {bounds}, i64 {n}, ptr {desc})")
    if chunks.outs:
        lines.append(f"  call void @{entry}_join(ptr %table, ptr {desc})")
    return head + (_per_call(c, entry, chunks, desc, lines) if chunks.per_call else lines)


def _private_tables(c, chunks, desc, table_slots):
    """Lines copying the pointer table into the private tables of chunks 1 .. %<c>k - 1 (the call's chunks,
    Chunks.counted) and pointing each at its partials: a loop, as the count is the call's."""
    lines = [f"  br label %{c}cp", f"{c}cp:", f"  %{c}i = phi i64 [1, %{c}split], [%{c}i1, %{c}cp]"]
    private = _load(lines, c, "t", f"%{c}tabs", f"%{c}i")
    lines += [f"  call void @llvm.memcpy.p0.p0.i64(ptr {private}, ptr %table, i64 {8 * table_slots}, i1 false)",
              f"  %{c}i0 = sub i64 %{c}i, 1", f"  %{c}pw = mul i64 %{c}i0, {len(chunks.outs)}"]
    for o, (slot, _, _) in enumerate(chunks.outs):
        lines.append(f"  %{c}pw{o} = add i64 %{c}pw, {chunks.partial_word(1, o)}")
        part = _load(lines, c, f"q{o}", desc, f"%{c}pw{o}")
        lines += [f"  %{c}s{o} = getelementptr ptr, ptr {private}, i64 {slot}", f"  store ptr {part}, ptr %{c}s{o}"]
    return lines + [f"  %{c}i1 = add i64 %{c}i, 1", f"  %{c}more = icmp slt i64 %{c}i1, %{c}k",
                    f"  br i1 %{c}more, label %{c}cp, label %{c}cpd", f"{c}cpd:"]


def _per_call(c, entry, chunks, desc, region):
    """The lines of `region` behind a branch on the descriptor's USED word (set per call: Region.resize):
    where it is 1, the kernel's entry runs all its rows at once on this thread (into the outputs
    themselves: no partials, no join), the pool and the Judge untouched."""
    return [f"  %{c}kp = getelementptr i64, ptr {desc}, i64 {USED}", f"  %{c}k = load i64, ptr %{c}kp",
            f"  %{c}one = icmp slt i64 %{c}k, 2", f"  br i1 %{c}one, label %{c}whole, label %{c}split", f"{c}whole:",
            f"  %{c}extp = getelementptr i64, ptr {desc}, i64 {bounds_word(chunks) + chunks.n}",
            f"  %{c}ext = load i64, ptr %{c}extp", f"  call void @{entry}(ptr %table, i64 0, i64 %{c}ext)",
            f"  br label %{c}done", f"{c}split:"] + region + [f"  br label %{c}done", f"{c}done:"]


def group_function(name, calls):
    """`void @name(ptr %table, i64 %lo, i64 %hi)`: the entry of a shared region, running member
    kernel `lo` whole (its lines calls[lo], driver.body_call)."""
    cases = " ".join(f"i64 {t}, label %m{t}" for t in range(len(calls)))
    blocks = "".join(f"m{t}:\n" + "\n".join(lines) + "\n  br label %end\n" for t, lines in enumerate(calls))
    return (f"define void @{name}(ptr nocapture readonly %table, i64 %lo, i64 %hi) #1 {{\nentry:\n"
            f"  switch i64 %lo, label %end [ {cases} ]\n{blocks}end:\n  ret void\n}}")


def region_functions(mb, entry, chunks):
    """The module text a region needs besides its kernel's entry: its chunk bounds, and the join of
    its partials (a kernel that accumulates); `mb` the module (the joins of online sums call exp)."""
    text = "" if chunks.symbolic() else (             # else in its descriptor, set per call (Region.resize)
        f"@{entry}_bounds = private unnamed_addr constant [{chunks.n + 1} x i64] "
        f"[{', '.join(f'i64 {b}' for b in chunks.bounds)}]\n")
    join = counted_join if chunks.counted else join_function
    return text + (join(mb, f"{entry}_join", chunks) if chunks.outs else "")


def online_joins(kernel, outs):
    """[(o, [(o2, g), ...])]: for an online walk whose threads split the rows (Schedule.online with
    rows), each maximum's output index among `outs` with those of the sums of exp(a - g(m)) that
    read it, and g (online_columns.py); each chunk's sums are relative to its own maximum."""
    sch = kernel.schedule
    if not outs or sch is None or not sch.online or not sch.rows:
        return []
    at = {id(v): o for o, (_, v, _) in enumerate(outs)}
    outv = [ph.outputs[0] for ph in kernel.phases]
    pairs = {}
    for i, j in sch.online:
        pairs.setdefault(at[id(outv[i][0])], []).append((at[id(outv[j][0])], _shift(outv[j][1], outv[i][0])))
    return sorted(pairs.items())


def _value(env, d):
    return value(d, env)


class Region:
    """A split kernel's run-time state: its descriptor (see the module's text), its private pointer
    tables and partial arrays, and its Judge."""

    def __init__(self, chunks, table, table_slots):
        n, outs, record = chunks.n, chunks.outs, getattr(chunks, "record", ())
        at = bounds_word(chunks) + (n + 1 if chunks.symbolic() else 0)     # the slot record's first word
        self.desc = np.zeros(at + (1 + len(record) if record else 0), np.int64)
        # symbolic bounds: the descriptor's words (set per call), else None (constants of the module)
        self.bounds = self.desc[bounds_word(chunks):at] if chunks.symbolic() else None
        self.private = [(ctypes.c_void_p * table_slots)() for _ in range(n - 1)] if outs else []
        self.desc[DESC_TABLES:DESC_TABLES + n] = [ctypes.addressof(table)] + [ctypes.addressof(t) for t in self.private] \
            if outs else [ctypes.addressof(table)] * n
        if record:          # each chunk gets the record (the table's address, then the slots), not the table
            self.desc[at:] = [ctypes.addressof(table), *record]
            self.desc[DESC_TABLES:DESC_TABLES + n] = self.desc[at:at + 1].ctypes.data
        self.chunks, self.judge, self.partials = chunks, Judge(), [None] * len(outs)
        self.rows = 1           # the extent split at the call, where symbolic (the Judge compares time per row)
        self.used = chunks.n   # the chunks this call runs (1: whole; per call where chunks.per_call)
        self.live = True        # whether a call at the latest sizes may run it on the pool (Program.live)
        for o in range(len(outs)) if not chunks.counted else ():      # (counted: for the chunks of a call)
            self._partials(o, hint(chunks.counts[o]))
        self.desc[0], self.desc[1] = self.judge.parallel(), -1
        self.address = self.desc.ctypes.data

    def _partials(self, o, elements):
        """Output o's partials for `elements` at the call (a symbolic output's grow to the largest call's):
        a row per chunk past the first (n - 1; a counted region's, per call: those of its largest call) of
        one array, a cache line apart, so that threads writing neighbouring rows never share one; their
        addresses and the count written into the descriptor."""
        v, p = self.chunks.outs[o][1], self.partials[o]
        rows = (self.used if self.chunks.counted else self.chunks.n) - 1
        self.desc[self.chunks.count_word(o)] = elements
        dtype = np.dtype(v.dtype.np)
        if p is not None and p.shape[0] >= rows and p.shape[1] >= elements:
            return
        if p is not None:
            rows, elements = max(rows, p.shape[0]), max(elements, p.shape[1] - 64 // dtype.itemsize)
        self.partials[o] = p = np.empty((rows, elements + 64 // dtype.itemsize), dtype)
        for i in range(1, rows + 1):
            self.desc[self.chunks.partial_word(i, o)] = p[i - 1:i].ctypes.data

    def resize(self, env):
        """A region over symbolic sizes: its chunks' bounds and its partials for the call's sizes `env`,
        and where it splits per call (Chunks.per_call), how many chunks, or whole (the USED word). One that
        runs whole at these sizes gets only its extent (the bounds' last word: what the whole run reads)."""
        size, chunks = partial(_value, env), self.chunks
        if self.bounds is not None:
            self.rows = size(chunks.extent)
        if chunks.per_call:
            self.used = self.desc[USED] = chunks.chunks_at(size, self.rows)
            self.live = self.used > 1
        else:
            self.live = chunks.splits_at(size)
        if self.bounds is not None and self.live:
            self.bounds[:] = chunks.cut(self.rows, self.used) if chunks.per_call else chunks.cut(self.rows)
        elif self.bounds is not None:
            self.bounds[-1] = self.rows
        for o in range(len(chunks.outs)) if self.live else ():
            if varies(chunks.counts[o]) or chunks.counted:
                self._partials(o, size(chunks.counts[o]))

    def learn(self):
        """The Judge learns from the last run (if the region ran since) and sets the next choice: from its
        seconds per row of the split extent where that is symbolic, so that calls of other sizes compare
        (a ragged batch's 17 rows on one thread never beat 256 on the pool by being shorter)."""
        d = self.desc
        used = int(d[1])
        if used >= 0:
            self.judge.record(used == 1, int(d[2]) * 1e-9 / max(self.rows, 1))
            d[0], d[1] = self.judge.parallel(), -1

