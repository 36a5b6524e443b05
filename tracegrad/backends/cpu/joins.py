"""The join functions of split kernels whose chunks accumulate partial results (regions.py): each
accumulated output joined with the chunks' partials in chunk order, float sums in float64 with a
compensated (Neumaier) sum, maxima, minima and integer sums exactly; an online column walk's maxima and
the sums that read them rescaled to the joined maximum. A kernel split per call (Chunks.counted) joins
only the chunks of the call (the descriptor's USED word), in a loop over them (`counted_join`)."""
from . import mathlib
from .loops import ACCESS, DISJOINT, ELEMENTS, _counted, _loops
from .reductions import _acc_dtype, _combine, _join, _narrow, _widen
from .scalar import SHORT, Emitter, Fn, fconst, regtype
from ...ir.kernels import loads

USED = 3                      # descriptor word: the chunks this call runs a per-call kernel in (1: whole; Region.resize)
JOIN_BLOCK = 256              # elements of a counted join's running sums (two float64 arrays on the stack: 4 KiB)


def join_function(mb, name, chunks):
    """`void @name(ptr %table, ptr %desc)`: each accumulated output joined with its partials, in
    chunk order (see the module's text), vectorized along the elements. Not inlined, optimized for
    size, its element loops neither interleaved nor unrolled (ELEMENTS): batch norm's module took
    5.0G instructions of LLVM with its joins unrolled at O3, 4.3G so (callgrind); a loop over the
    chunks inside the element loop compiled in 3.1G but ran scalar (W6: 0.16 -> 0.29 ms per call)."""
    f = Fn()
    online = {o for m, sums in chunks.online for o in [m] + [o2 for o2, _ in sums]}
    for m, sums in chunks.online:
        _online_join(mb, f, chunks, m, sums)
    for o, (slot, v, lower) in enumerate(chunks.outs):
        if o in online:
            continue
        out = f.assign(f"load ptr, ptr {f.assign(f'getelementptr ptr, ptr %table, i64 {slot}')}")
        parts = [f.assign(f"load ptr, ptr {f.assign(f'getelementptr i64, ptr %desc, i64 {chunks.partial_word(i, o)}')}")
                 for i in range(1, chunks.n)]
        dt, at = v.dtype, _acc_dtype(lower, v.dtype)
        ty, aty = regtype(dt), regtype(at)

        def element(f, idx, out=out, parts=parts, dt=dt, at=at, ty=ty, aty=aty, lower=lower):
            e = idx[0]
            p = f.assign(f"getelementptr {ty}, ptr {out}, i64 {e}")
            xs = [_widen(f, f.assign(f"load {ty}, ptr {q}"), dt, at) for q in
                  [p] + [f.assign(f"getelementptr {ty}, ptr {part}, i64 {e}") for part in parts]]
            if _join(lower) == "+" and at.is_floating_point:
                total = _compensated(f, xs, aty)
            else:
                total = xs[0]
                for x in xs[1:]:
                    total = _combine(f, lower, total, x, at)
            f.emit(f"store {ty} {_narrow(f, total, dt, at)}, ptr {p}")
        _loops(f, [chunks.count(f, o)], element, meta=ELEMENTS)
    f.emit("ret void")
    return (f"define internal void @{name}(ptr noalias %table, ptr noalias %desc) noinline optsize #1 {{\nentry:\n"
            + "\n".join(f.allocas + f.lines) + "\n}\n")


def counted_join(mb, name, chunks):
    """`void @name(ptr %table, ptr %desc)`: `join_function` for the call's chunks (the descriptor's USED
    word, 2 or more: Chunks.counted): per block of JOIN_BLOCK elements, each output's running sum (and
    its compensation) in a stack array, then each chunk's partial added into it in chunk order, an element
    loop LLVM vectorizes, then narrowed into the output: the static join's operations in its order."""
    f = Fn()
    k = f.assign(f"load i64, ptr {f.assign(f'getelementptr i64, ptr %desc, i64 {USED}')}")
    for o, (slot, v, lower) in enumerate(chunks.outs):
        out = f.assign(f"load ptr, ptr {f.assign(f'getelementptr ptr, ptr %table, i64 {slot}')}")
        dt, at = v.dtype, _acc_dtype(lower, v.dtype)
        ty, aty, kahan = regtype(dt), regtype(at), _join(lower) == "+" and at.is_floating_point
        sums, comps = f.alloca(f"[{JOIN_BLOCK} x {aty}]"), kahan and f.alloca(f"[{JOIN_BLOCK} x {aty}]")
        count = chunks.count(f, o)
        blocks = f.assign(f"sdiv i64 {f.assign(f'add nsw i64 {count}, {JOIN_BLOCK - 1}')}, {JOIN_BLOCK}")

        def block(f, b):        # (emitted within this output's turn of the loop: its values)
            first = f.assign(f"mul nsw i64 {b}, {JOIN_BLOCK}")
            left = f.assign(f"sub nsw i64 {count}, {first}")
            m = f.assign(f"select i1 {f.assign(f'icmp slt i64 {left}, {JOIN_BLOCK}')}, i64 {left}, i64 {JOIN_BLOCK}")

            def at_(f, arr, e):
                return f.assign(f"getelementptr [{JOIN_BLOCK} x {aty}], ptr {arr}, i64 0, i64 {e}")

            def element(f, base, e):
                return f.assign(f"getelementptr {ty}, ptr {base}, i64 {f.assign(f'add nsw i64 {first}, {e}')}")

            def start(f, e):
                x = f.assign(f"load {ty}, ptr {element(f, out, e)}")
                f.emit(f"store {aty} {_widen(f, x, dt, at)}, ptr {at_(f, sums, e)}")
                if kahan:
                    f.emit(f"store {aty} 0.0, ptr {at_(f, comps, e)}")

            def chunk(f, i):
                row = f.assign(f"mul i64 {f.assign(f'sub i64 {i}, 1')}, {len(chunks.outs)}")
                word = f.assign(f"add i64 {row}, {chunks.partial_word(1, o)}")
                part = f.assign(f"load ptr, ptr {f.assign(f'getelementptr i64, ptr %desc, i64 {word}')}")

                def add(f, e):
                    x = _widen(f, f.assign(f"load {ty}, ptr {element(f, part, e)}"), dt, at)
                    sp = at_(f, sums, e)
                    total = f.assign(f"load {aty}, ptr {sp}")
                    if kahan:
                        cp = at_(f, comps, e)
                        total, comp = _neumaier(f, total, f.assign(f"load {aty}, ptr {cp}"), x, aty)
                        f.emit(f"store {aty} {comp}, ptr {cp}")
                    else:
                        total = _combine(f, lower, total, x, at)
                    f.emit(f"store {aty} {total}, ptr {sp}")
                _counted(f, "0", m, add, ELEMENTS)

            def end(f, e):
                total = f.assign(f"load {aty}, ptr {at_(f, sums, e)}")
                if kahan:
                    total = _neumaier_total(f, total, f.assign(f"load {aty}, ptr {at_(f, comps, e)}"), aty)
                f.emit(f"store {ty} {_narrow(f, total, dt, at)}, ptr {element(f, out, e)}")
            _counted(f, "0", m, start, ELEMENTS)
            _counted(f, "1", k, chunk)
            _counted(f, "0", m, end, ELEMENTS)
        _counted(f, "0", blocks, block)
    f.emit("ret void")
    return (f"define internal void @{name}(ptr noalias %table, ptr noalias %desc) noinline optsize #1 {{\nentry:\n"
            + "\n".join(f.allocas + f.lines) + "\n}\n")


def _online_join(mb, f, chunks, m, sums):
    """Lines joining the chunks' maxima (output m) and the sums that read them ([(output, g)]) per
    element: M the maximum of the chunks' maxima, each sum the float64 total over the chunks, in
    chunk order, of S_i * exp(g(M_i) - g(M)) (1 where g(M_i) == g(M); a factor or S_i of 0 adds 0:
    the chunk's terms may be exp(-inf - -inf)), as the walk rescales its running sums."""
    def pointers(o):
        slot = chunks.outs[o][0]
        out = f.assign(f"load ptr, ptr {f.assign(f'getelementptr ptr, ptr %table, i64 {slot}')}")
        return [out] + [f.assign(f"load ptr, ptr {f.assign(f'getelementptr i64, ptr %desc, i64 {chunks.partial_word(i, o)}')}")
                        for i in range(1, chunks.n)]
    mv, mlower = chunks.outs[m][1], chunks.outs[m][2]
    dt, ty = mv.dtype, regtype(mv.dtype)
    mptrs, sptrs = pointers(m), [pointers(o) for o, _ in sums]
    key = ("exp", SHORT[dt.name])
    mb.math.add(key)

    def shift(f, g, x):
        em = Emitter(mb, f, {}, [])
        for ld in loads(g):
            em.memo[id(ld)] = x
        return em.value(g)

    def element(f, idx):
        e = idx[0]
        at = [f.assign(f"getelementptr {ty}, ptr {p}, i64 {e}") for p in mptrs]
        ms = [f.assign(f"load {ty}, ptr {p}, {ACCESS}") for p in at]
        big = ms[0]
        for x in ms[1:]:
            big = _combine(f, mlower, big, x, dt)
        f.emit(f"store {ty} {big}, ptr {at[0]}, {ACCESS}")
        for (o, g), ptrs in zip(sums, sptrs):
            v, lower = chunks.outs[o][1], chunks.outs[o][2]
            acc = _acc_dtype(lower, v.dtype)
            aty, g_big = regtype(acc), shift(f, g, big)
            total = fconst(0, acc)
            dst = None
            for i, (mi, p) in enumerate(zip(ms, ptrs)):
                q = f.assign(f"getelementptr {ty}, ptr {p}, i64 {e}")
                dst = dst or q
                s_i = _widen(f, f.assign(f"load {ty}, ptr {q}, {ACCESS}"), dt, acc)
                g_i = shift(f, g, mi)
                diff = f.assign(f"fsub {ty} {g_i}, {g_big}")
                ex = f.assign(f"call {ty} {mathlib.symbol(*key)}({ty} {diff})")
                fac = f.assign(f"select i1 {f.assign(f'fcmp oeq {ty} {g_i}, {g_big}')}, {ty} {fconst(1, dt)}, {ty} {ex}")
                wide = _widen(f, fac, dt, acc)
                gone = f.assign(f"or i1 {f.assign(f'fcmp oeq {aty} {s_i}, {fconst(0, acc)}')}, "
                                f"{f.assign(f'fcmp oeq {aty} {wide}, {fconst(0, acc)}')}")
                term = f.assign(f"select i1 {gone}, {aty} {fconst(0, acc)}, {aty} {f.assign(f'fmul {aty} {s_i}, {wide}')}")
                total = f.assign(f"fadd {aty} {total}, {term}")
            f.emit(f"store {ty} {_narrow(f, total, dt, acc)}, ptr {dst}, {ACCESS}")
    _loops(f, [chunks.count(f, m)], element, meta=DISJOINT)


def _compensated(f, xs, ty):
    """The sum of float registers xs (Neumaier's compensated sum, no fast-math: the rounding errors
    of the additions are added back at the end). A non-finite sum (inf, NaN) is returned as it is."""
    s, comp = xs[0], "0.0"
    for x in xs[1:]:
        s, comp = _neumaier(f, s, comp, x, ty)
    return s if len(xs) == 1 else _neumaier_total(f, s, comp, ty)


def _fabs(f, x, ty):
    return f.assign(f"call {ty} @llvm.fabs.{'f64' if ty == 'double' else 'f32'}({ty} {x})")


def _neumaier(f, s, comp, x, ty):
    """(s + x, comp plus that addition's rounding error): one step of Neumaier's sum."""
    t = f.assign(f"fadd {ty} {s}, {x}")
    ge = f.assign(f"fcmp oge {ty} {_fabs(f, s, ty)}, {_fabs(f, x, ty)}")
    big, small = f.assign(f"select i1 {ge}, {ty} {s}, {ty} {x}"), f.assign(f"select i1 {ge}, {ty} {x}, {ty} {s}")
    err = f.assign(f"fadd {ty} {f.assign(f'fsub {ty} {big}, {t}')}, {small}")
    return t, f.assign(f"fadd {ty} {comp}, {err}")


def _neumaier_total(f, s, comp, ty):
    """The compensated total of sum s and compensation comp; a non-finite s as it is."""
    finite = f.assign(f"fcmp olt {ty} {_fabs(f, s, ty)}, 0x7FF0000000000000")
    return f.assign(f"select i1 {finite}, {ty} {f.assign(f'fadd {ty} {s}, {comp}')}, {ty} {s}")
