"""Operands transposed through registers a tile at a time (Schedule.transposed): each whole tile of an
operand that walks axis a with unit stride is read with unit-stride vectors along a, transposed in
registers by a network of shuffles, and kept in a stack tile laid out along b; the element loops
then read it, and every other operand, along b, so they vectorize with unit-stride loads (instead
of a gather per vector of the strided operand). In a transposing map (transposed_map) b is the
outputs' unit-stride axis; in a reduction across a kept axis (transposed_across) b is that axis and
a the innermost reduced one. Tiles cut by the space's edge run the plain element loops."""
from ...ir.kernels import contiguous_strides
from .host import vector_bytes
from .loops import SCALAR, _counted, _loops, _nest
from .scalar import Emitter, linear, lltype, store


def key(ld):
    """Loads of one buffer at the same strides and offset read the same values."""
    return id(ld.buf), ld.strides, ld.offset


def interleave_masks(lanes):
    """The shufflevector masks of the low and high interleaves of two vectors of `lanes` lanes."""
    half = lanes // 2
    lo = [e for k in range(half) for e in (k, k + lanes)]
    hi = [e for k in range(half, lanes) for e in (k, k + lanes)]
    return lo, hi


def transpose_rows(f, rows, ty):
    """Emit the transpose of a square block held in registers: rows[r] is a vector of n = len(rows)
    lanes of type ty (lane c: element (r, c)); returns the n columns (lane r of column c: element
    (r, c)). log2(n) rounds of the perfect shuffle, each making rows 2p and 2p + 1 from the low and
    high interleaves of rows p and p + n/2."""
    n = len(rows)
    vty = f"<{n} x {ty}>"
    masks = [f"<{', '.join(f'i32 {i}' for i in m)}>" for m in interleave_masks(n)]
    for _ in range(n.bit_length() - 1):
        rows = [f.assign(f"shufflevector {vty} {rows[p]}, {vty} {rows[p + n // 2]}, <{n} x i32> {m}")
                for p in range(n // 2) for m in masks]
    return rows


class _Staged(Emitter):
    """An Emitter whose transposed operands read their stack tile at (il, jl)."""

    def __init__(self, mb, f, ptrs, idx, tiles, local):
        super().__init__(mb, f, ptrs, idx)
        self.tiles, self.local = tiles, local

    def read(self, ld):
        tile = self.tiles.get(key(ld))
        if tile is None:
            return super().read(ld)
        ty = lltype(ld.dtype)
        return self.f.assign(f"load {ty}, ptr {self.f.assign(f'getelementptr inbounds {ty}, ptr {tile}, i64 {self.local}')}")


def _fill(f, ptrs, ld, tile, idx, a, b, sides):
    """Emit the copy of operand ld's tile at idx (the tile's first element) into stack tile `tile`
    (sides = (ta, tb): element (il, jl) at il * tb + jl): blocks of n x n, n the lanes of a vector,
    each read as n vectors along a (rows jl), transposed in registers, stored as n rows along b."""
    ta, side = sides
    ty, n = lltype(ld.dtype), vector_bytes() // ld.dtype.itemsize
    vty, sb = f"<{n} x {ty}>", ld.strides[b]
    src = ptrs[id(ld.buf)]

    def block(f, pq):
        ia, jb = (f.assign(f"mul nsw i64 {i}, {n}") for i in pq)
        at = dict(idx)
        at[a], at[b] = f.assign(f"add nsw i64 {idx[a]}, {ia}"), f.assign(f"add nsw i64 {idx[b]}, {jb}")
        first = linear(f, [at[d] for d in range(len(ld.strides))], ld.strides, ld.offset)
        rows = []
        for r in range(n):
            off = f.assign(f"add nsw i64 {first}, {r * sb}") if r else first
            p = f.assign(f"getelementptr inbounds {ty}, ptr {src}, i64 {off}")
            rows.append(f.assign(f"load {vty}, ptr {p}, align {ld.dtype.itemsize}"))
        row0 = f.assign(f"add nsw i64 {f.assign(f'mul nsw i64 {ia}, {side}')}, {jb}")
        for c, col in enumerate(transpose_rows(f, rows, ty)):
            q = f.assign(f"getelementptr inbounds {ty}, ptr {tile}, i64 {f.assign(f'add nsw i64 {row0}, {c * side}')}")
            f.emit(f"store {vty} {col}, ptr {q}, align {vector_bytes()}")
    _loops(f, [ta // n, side // n], block)


def transposed_map(mb, f, kernel, ptrs, put):
    """Lower a map kernel whose schedule transposes operands in registers (Schedule.transposed; its
    levels end with the tile loops of a and b, then (a, 0), (b, 0)): per tile, each such operand's
    tile is filled (_fill) and the element loops run over it, row by row, each row vectorized along
    b. put(mb, f, ptrs, phases, idx, full) emits the phases' stores at one element (scheduled.py's,
    for the tiles the edge cuts)."""
    sch, shape = kernel.schedule, kernel.shape
    (a, _), (b, _) = sch.levels[-2:]
    ta, side = (next(t for d, t in sch.levels if d == e and t) for e in (a, b))
    assert all(t % (vector_bytes() // ld.dtype.itemsize) == 0 for t in (ta, side) for ld in sch.transposed)
    full = contiguous_strides(shape)
    tiles = {}
    for ld in sch.transposed:
        tiles.setdefault(key(ld), (ld, f.alloca(f"[{ta * side} x {lltype(ld.dtype)}]")))

    def tile(f, idx, base):
        (a0, a1), (b0, b1) = base[a], base[b]
        inside = f.assign(f"and i1 {f.assign(f'icmp sle i64 {a1}, {shape[a]}')}, "
                          f"{f.assign(f'icmp sle i64 {b1}, {shape[b]}')}")
        whole, cut, done = f.label(), f.label(), f.label()
        f.emit(f"br i1 {inside}, label %{whole}, label %{cut}")
        f.block(whole)
        corner = dict(idx)
        corner[a], corner[b] = a0, b0
        for ld, buf in tiles.values():
            _fill(f, ptrs, ld, buf, corner, a, b, (ta, side))

        def element(f, ij):
            il, jl = ij
            at = dict(idx)
            at[a], at[b] = f.assign(f"add nsw i64 {a0}, {il}"), f.assign(f"add nsw i64 {b0}, {jl}")
            ix = [at[d] for d in range(len(shape))]
            local = f.assign(f"add nsw i64 {f.assign(f'mul nsw i64 {il}, {side}')}, {jl}")
            em = _Staged(mb, f, ptrs, ix, {k: buf for k, (_, buf) in tiles.items()}, local)
            off = linear(f, ix, full)
            for ph in kernel.phases:
                for v, val in [(v, em.value(t)) for v, t in ph.outputs]:
                    store(f, ptrs, v, off, val)
        _loops(f, [ta, side], element, meta=SCALAR)      # the rows in turn, each vectorized along b
        f.emit(f"br label %{done}")
        f.block(cut)
        _nest(f, shape, sch.levels[-2:],
              lambda f, ix, bs: put(mb, f, ptrs, kernel.phases, [ix[d] for d in range(len(shape))], full),
              idx=idx, base=base)
        f.emit(f"br label %{done}")
        f.block(done)

    _nest(f, shape, sch.levels[:-2], tile, lo_hi=("%lo", "%hi"))


def transposed_across(mb, f, kernel, ptrs, levels, idx, base, body):
    """Emit the reduced levels `levels` (ending (r, 0), (u, 0): r the innermost reduced axis, u the
    kept axis reduced across, its tile in base[u]) of an across kernel whose schedule transposes the
    operands that walk r with unit stride: each whole tile of one vector's lanes along r by the
    tile of u is filled (_fill) and its elements run row by row, each row vectorized along u;
    the rest of r (and a u tile cut by the edge) runs the plain element loops. body(f, idx, base,
    emitter) accumulates one element (the emitter reads the stack tiles; None: a plain one)."""
    shape, sch = kernel.shape, kernel.schedule
    (r, _), (u, _) = levels[-2:]
    ta = vector_bytes() // min(ld.dtype.itemsize for ld in sch.transposed)
    side = next(t for d, t in sch.levels if d == u and t)
    tiles = {}
    for ld in sch.transposed:
        tiles.setdefault(key(ld), (ld, f.alloca(f"[{ta * side} x {lltype(ld.dtype)}]")))
    staged = {k: buf for k, (_, buf) in tiles.items()}

    def over_r(f, idx, base):
        (u0, u1) = base[u]
        start, end = base.get(r, ("0", str(shape[r])))
        stop = f.assign(f"select i1 {f.assign(f'icmp slt i64 {end}, {shape[r]}')}, i64 {end}, i64 {shape[r]}")
        whole_u = f.assign(f"icmp sle i64 {u1}, {shape[u]}")
        tiles_r = f.assign(f"sdiv i64 {f.assign(f'sub nsw i64 {stop}, {start}')}, {ta}")
        count = f.assign(f"select i1 {whole_u}, i64 {tiles_r}, i64 0")

        def tile(f, t):
            r0 = f.assign(f"add nsw i64 {start}, {f.assign(f'mul nsw i64 {t}, {ta}')}")
            corner = dict(idx)
            corner[r], corner[u] = r0, u0
            for ld, buf in tiles.values():
                _fill(f, ptrs, ld, buf, corner, r, u, (ta, side))

            def element(f, ij):
                rl, ul = ij
                at = dict(idx)
                at[r], at[u] = f.assign(f"add nsw i64 {r0}, {rl}"), f.assign(f"add nsw i64 {u0}, {ul}")
                local = f.assign(f"add nsw i64 {f.assign(f'mul nsw i64 {rl}, {side}')}, {ul}")
                body(f, at, base, _Staged(mb, f, ptrs, [at[d] for d in range(len(shape))], staged, local))
            _loops(f, [ta, side], element, meta=SCALAR)     # the rows in turn, each vectorized along u
        _counted(f, "0", count, tile)
        rest = f.assign(f"add nsw i64 {start}, {f.assign(f'mul nsw i64 {count}, {ta}')}")
        left = dict(base)
        left[r] = (rest, stop)
        _nest(f, shape, levels[-2:], lambda f, ix, bs: body(f, ix, bs, None), idx=idx, base=left)

    _nest(f, shape, levels[:-2], over_r, idx=idx, base=base)
