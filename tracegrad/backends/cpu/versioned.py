"""Loop versioning on a symbolic innermost extent: a kernel body with a fast copy for the traced size.

A symbolic kernel (sizes.py) reads its innermost extent at the call, so LLVM knows neither its loops'
trip counts nor their vector remainders. Where that extent is short (a hint of at most VERSIONED_EXTENT,
plan/limits.py), its body is emitted as an always-inline function `<body>.any` of the extent `%ext`;
the body proper computes the call's extent and calls it with the constant hint where the two are
equal (LLVM folds that copy's trip counts, as in the static compile) and with the call's extent
otherwise. W6 (rows of 128): dynamic=True took 1.28x the static compile's CPU time, 1.00-1.08x
versioned. Only such short-row kernels' code (and LLVM time) doubles; longer rows spend little of
their time on loop control and keep one copy.
"""
import re

from ...symint import hint, is_sym
from .plan.limits import VERSIONED_EXTENT
from .reductions import _squeezed
from .sizes import NAME as SIZES, expression

EXT = "%ext"      # the register of the extent in a versioned body


def extent(shape):
    """The innermost extent of a kernel's `shape` (its last axis not known to be 1) where the body is
    versioned on it: a symbolic size whose hint is in (1, VERSIONED_EXTENT]; else None."""
    dims = _squeezed(shape)
    d = dims[-1] if dims else None
    return d if is_sym(d) and 1 < hint(d) <= VERSIONED_EXTENT else None


def version(f, ext):
    """The version of body f (scalar.Fn) emitted with `ext` (extent()) as EXT: (its expression, hint), or
    None (and EXT no longer stands for it) when no line of f reads it."""
    if ext is None:
        return None
    if any(re.search(rf"{EXT}\b(?!\.)", line) for line in f.allocas + f.lines):
        return ext.expr, hint(ext)
    del f.size_regs[ext.expr]
    return None


def functions(key, name, symbols):
    """The LLVM functions of body `name` of key (params, body lines, attributes, version()), whose
    symbols are `symbols` (sizes.Symbols): the body; or, versioned, its dispatch and `<name>.any`."""
    params, body, attrs, ver = key
    if ver is None:
        return [f"define internal void @{name}({params}) noinline{attrs} #1 {{\nentry:\n{body}\n}}"]
    expr, h = ver
    lines = []
    ext = expression(lines.append, f"%{SIZES}", symbols.index, expr, EXT)
    args = ", ".join(f"{p.split()[0]} {p.split()[-1]}" for p in params.split(", "))
    call = f"  call void @{name}.any({args}, i64 {{}})\n  ret void"
    return [f"define internal void @{name}({params}) noinline{attrs} #1 {{\nentry:\n" + "\n".join(lines)
            + f"\n  %ext.hint = icmp eq i64 {ext}, {h}\n  br i1 %ext.hint, label %hint, label %any\n"
            f"hint:\n{call.format(h)}\nany:\n{call.format(ext)}\n}}",
            f"define internal void @{name}.any({params}, i64 {EXT}) alwaysinline{attrs} #1 {{\nentry:\n{body}\n}}"]
