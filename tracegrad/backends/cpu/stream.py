"""Streaming (non-temporal) stores for large outputs that a program writes once and never rereads.

A normal store first reads the cache line it writes (read for ownership): a kernel writing a fresh
16 MB output moves 32 MB for it. A non-temporal store writes whole lines straight to memory, so a
memory-bound kernel moves a third to a quarter fewer bytes (layer norm backward: read x and g,
write dx). It is worth it only where the written line would not be read again from cache anyway.

The rule (the planner's `streamed`, plan/__init__.py): a value's stores stream when it is
  - an output a call allocates afresh (never an input's memory, an in-place update, a planned
    intermediate or a recycled small output),
  - written by a map phase of a loop or reduce_acc kernel,
  - read by no kernel of the same program (nothing rereads it while it may still be in cache),
  - at least stream_min_bytes large (machine.py, read by plan/limits.py): measured by `python -m tracegrad.bench.streaming` (a map and a
    NumPy reduction reading its output right after it, inputs evicted between rounds) on the 2-core
    bench machine (2 MiB L2 per core), one thread: streaming took 0.89x the time of both together
    at 4 MiB, 0.78x at 16 MiB, 1.02x at 2 MiB and 1.12x at 1 MiB (below that the reader finds a
    normally stored output in cache);
and then only its whole, aligned vector stores stream: the runtime allocates such outputs on a
64-byte boundary, the kernel's pointer argument says so (`align 64`, named `%stream<i>`), and after
LLVM's optimization `mark` adds `!nontemporal` to each vector store through that pointer whose
alignment LLVM proved to be at least the vector's size (rows whose byte length is a multiple of 64;
contiguous maps whose chunks start on a vector). Scalar tails and unaligned vectors stay normal
stores. A function that streams ends with a fence, so the stores are visible to the thread that
joins the chunks.

The decision shows in the LLVM text (`stage="llvm"`): a comment line per streamed buffer, its
pointer argument, and with `optimized=True` the `!nontemporal` stores.
"""
import math
import re

import numpy as np


ALIGN = 64                  # bytes: a cache line, and the widest vector (AVX-512)
NAME = "stream"             # pointer arguments of streamed buffers are %stream<i>
VERSION = 3                 # in the module's text, so the disk cache never mixes two versions of `mark`


def comment(name, values):
    """The module text's line naming the buffers kernel body `name` streams."""
    return (f"; streamed stores (stream.py v{VERSION}: whole aligned vectors !nontemporal): {name} "
            + ", ".join(f"%{NAME}{i} {v.type}" for i, v in values))


def empty(shape, dtype):
    """An uninitialized C-contiguous array of `shape` whose data starts on an ALIGN-byte boundary. Its
    base is a memoryview of the block, not an array: as a fresh PyTorch result, its storage starts
    at its first element (storage_offset() 0) and it shares memory with nothing else."""
    n = math.prod(shape) * dtype.itemsize
    raw = np.empty(n + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    return np.frombuffer(memoryview(raw)[start:start + n], dtype).reshape(shape)


_DEFINE = re.compile(r"^define .*\{$")
_ARG = re.compile(rf"%({NAME}\d+)[,)]")
_GEP = re.compile(r"^\s*(%[-\w.]+) = (?:getelementptr [^%]*?|(?:tail )?call [^@(]*@llvm\.ptrmask\.p0\.i64\()ptr (%[-\w.]+)")
_STORE = re.compile(r"^(\s*store <(\d+) x (float|double|i\d+)> [^,]+, ptr (%[-\w.]+), align (\d+))(.*)$")
_BITS = {"float": 32, "double": 64}


def mark(text):
    """Optimized module text -> the same with `!nontemporal` on every whole, aligned vector store
    through a streamed pointer argument, and a fence before each return of a function that has one.
    Only a function's widest such stores stream: a narrower one (a vectorized loop's epilogue, 32 of
    a row's 800 bytes) writes part of a line whose rest normal stores write, and a line written
    partly non-temporally is flushed half-empty (x[:, None, :] broadcast into (64, 512, 200): 4x
    slower)."""
    if f"%{NAME}" not in text:
        return text
    lines, out, node = text.split("\n"), [], None
    used = [int(m) for m in re.findall(r"^!(\d+) = ", text, re.M)]
    tag = f"!{max(used, default=-1) + 1}"
    stores = _streamed_stores(lines)
    widest = {}
    for fn, size, _ in stores.values():
        widest[fn] = max(widest.get(fn, 0), size)
    marked = False
    for i, line in enumerate(lines):
        if _DEFINE.match(line):
            marked = False
        elif i in stores:
            fn, size, align = stores[i]
            if size >= 16 and align >= size and size == widest[fn]:
                m = _STORE.match(line)
                line = f"{m[1]}, !nontemporal {tag}{m[6]}"
                marked = node = True
        if line.strip() == "ret void" and marked:
            out.append("  fence seq_cst")
        out.append(line)
    if node:
        out.append(f"{tag} = !{{i32 1}}")
    return "\n".join(out)


def _streamed_stores(lines):
    """{line index: (function's line index, bytes, alignment)} of the vector stores through a
    streamed pointer argument (or an address computed from one: getelementptr, llvm.ptrmask)."""
    stores, roots, fn = {}, {}, None
    for i, line in enumerate(lines):
        if _DEFINE.match(line):
            roots, fn = {f"%{a}": f"%{a}" for a in _ARG.findall(line)}, i
        elif (m := _GEP.match(line)) and m[2] in roots:
            roots[m[1]] = roots[m[2]]
        elif (m := _STORE.match(line)) and m[4] in roots:
            n, ty = int(m[2]), m[3]
            stores[i] = (fn, n * _BITS.get(ty, int(ty[1:]) if ty.startswith("i") else 0) // 8, int(m[5]))
    return stores
