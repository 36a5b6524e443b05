"""A program's call as straight-line Python, generated once per program.

Program.run binds arrays to slots in loops over lists of specs and dispatches each step on its
kind; for a small program that bookkeeping costs more than its kernels. `straight_run(prog)` writes
the same steps for one program with its slots, shapes and dtypes as constants: check and bind each
input whose array is not the one bound last call (an array object keeps its shape, dtype, strides
and memory: a training step's hundreds of parameters cost one weakref read each), reuse or
allocate each fresh output, point the table at the thread pool (a program with parallel
regions), call each native segment, let each region's Judge learn, return the outputs. Only
programs whose every step is a native segment get one (a program with host steps is large, and its
bookkeeping is noise); the others keep Program.run. `prog.run_source` is the text.
"""
import sys
import weakref

import numpy as np

from .threads import _POOL as _POOLS

_getrefcount = sys.getrefcount


def _count_held():
    """The reference count the generated code reads of a recycled output it holds in one list
    cell and one local variable."""
    cell = [np.empty(0)]
    a = cell[0]
    return _getrefcount(a)


HELD = _count_held()


def straight_run(prog, general, address):
    """(run, its source): the generated `run(arrays, timings=None, capture=None)` of Program `prog`, or None when a
    step of its plan is not a native segment. `general(arrays, timings, capture)` is Program.run
    (check mode and profiles go there); `address(array)` the data address of a contiguous array."""
    if any(step[0] != "call" for step in prog.plan) or \
            prog.symbolic and any(shape is not None for _, shape in prog.outputs):
        return None
    sym = prog.symbolic         # sizes known at the call: bound first (Program._resize), shapes read per call
    env = {"general": general, "address": address, "empty": np.empty, "getrefcount": _getrefcount, "HELD": HELD,
           "table": prog.table, "lock": prog.lock, "bind": _binder(address)}
    names = {}                    # slot -> the local variable holding its array this call
    lines = ["def run(arrays, timings=None, capture=None, sizes=None):",
             "    if timings is not None or capture is not None:",
             "        return general(arrays, timings, capture, sizes)"]
    n = len(prog.inputs)
    lines.append(f"    ({''.join(f'a{i}, ' for i in range(n))}) = arrays" if n else "    () = arrays")
    lines.append("    with lock:")
    if sym:
        env["resize"], env["GIVEN"] = prog._resize, prog.given
        lines += ["        if sizes is None or sizes is not GIVEN[0]:     # else the sizes bound before",
                  "            resize(arrays, sizes)"]
    into = {}                     # input slot -> the output slots written into it (its address too)
    for o, i in prog.inplace:
        into.setdefault(i, []).append(o)
    for i, (slot, *_rest) in enumerate(prog.inputs):
        env[f"IN{i}"] = prog.inputs[i]        # [slot, shape, dtype, weakref to last array, its address]
        names[slot] = f"a{i}"
        lines += [f"        if IN{i}[3]() is not a{i}:     # else the array bound before: checked, in the table",
                  f"            a{i} = bind(IN{i}, a{i}, table)"]
        lines += [f"            table[{o}] = table[{slot}]" for o in into.get(slot, ())]
    for o, i in prog.inplace:
        names[o] = names[i]
    for k, (slot, shape, dtype, recycled, _, _, make, _, _) in enumerate(prog.fresh):
        env[f"FSH{k}"], env[f"FDT{k}"], env[f"FR{k}"] = shape, dtype, prog.fresh[k]
        if sym:                  # this call's shape (Program._resize sets it)
            lines.append(f"        FSH{k} = FR{k}[1]")
        empty = "empty" if make is np.empty else f"EMPTY{k}"
        env[empty] = make
        names[slot] = f"o{k}"
        if recycled:             # an array of the two previous calls when nothing else holds it now
            free = f"o{k} is not None and getrefcount(o{k}) == HELD and o{k}.flags.writeable and o{k}.shape == FSH{k}"
            lines += [f"        o{k} = FR{k}[4]",
                      f"        if not ({free}):",
                      f"            o{k} = FR{k}[7]",
                      f"            if {free}:",
                      f"                FR{k}[4:6], FR{k}[7:9] = FR{k}[7:9], FR{k}[4:6]",
                      "            else:",
                      f"                o{k} = {empty}(FSH{k}, FDT{k})",
                      f"                FR{k}[7:9], FR{k}[4:6] = FR{k}[4:6], (o{k}, address(o{k}))",
                      f"            table[{slot}] = FR{k}[5]"]
        else:
            lines += [f"        o{k} = {empty}(FSH{k}, FDT{k})",
                      f"        table[{slot}] = address(o{k})"]
    if prog.regions:
        env["use_pool"] = prog.use_pool
        lines.append("        use_pool()")
    for j, step in enumerate(prog.plan):
        env[f"seg{j}"] = step[1]
        if step[3]:
            env["POOLS"] = _POOLS
            lines += ["        if POOLS:",
                      "            POOLS[0].park()       # spinning workers leave the cores to BLAS"]
        lines.append(f"        seg{j}()")
    if prog.regions:            # (the list Program._resize updates for the call's sizes)
        env["LEARNS"] = prog.learns
        lines += ["        for learn in LEARNS:", "            learn()"]
    outs = []
    for j, (slot, shape) in enumerate(prog.outputs):
        if slot not in names:                 # a planned intermediate returned (no copy, as Program.run)
            env[f"T{slot}"] = prog.template[slot]
            names[slot] = f"T{slot}"
            if sym:                           # carved per call for the call's sizes
                env["template"] = prog.template
                lines.append(f"        T{slot} = template[{slot}]")
        if shape is None:
            outs.append(names[slot])
        else:
            env[f"OSH{j}"] = tuple(shape)
            outs.append(f"{names[slot]}.reshape(OSH{j})")
    lines.append(f"        return ({''.join(o + ', ' for o in outs)})")
    source = "\n".join(lines) + "\n"
    exec(compile(source, f"<straight run of {prog.graph.name}>", "exec"), env)
    return env["run"], source


def _binder(address):
    """bind(spec, a, table): input array `a` checked against its spec (shape and dtype; a copy where
    not row-major) and its address written into the table; the array bound. A call passing the
    array bound last time skips this: an array object keeps its shape, dtype, strides and memory."""
    def bind(spec, a, table):
        slot, shape, dtype = spec[0], spec[1], spec[2]       # (symbolic: the shape under the call's sizes)
        if shape is not None and a.shape != shape or a.dtype is not dtype and a.dtype != dtype:
            raise ValueError(f"compiled kernel input: expected {dtype}{list(shape)}, got {a.dtype}{list(a.shape)}")
        if not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)
        spec[3] = weakref.ref(a)
        table[slot] = spec[4] = address(a)
        return a
    return bind
