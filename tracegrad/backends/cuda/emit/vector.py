"""Vector memory access for generated kernels: `vload4(arr, i)` -> the 4 elements arr[i:i + 4] in one
16-byte load (`ld.global.v4`), `vstore4(arr, i, a, b, c, d)` in one store, the same for 2 (`vload2`,
`vstore2`), and `address(arr)`, the device address of arr's first element. numba.cuda has no vector
loads of its own and no alignment information, so NVVM never merges scalar loads: these are numba
intrinsics emitting LLVM vector loads and stores aligned to their width. The caller guarantees the
alignment (i a multiple of the width, and the arrays' addresses checked at run time: skeletons.py's
vector map). Under numba's simulator the generated module binds the Python stand-ins `SIM` instead.
"""
from llvmlite import ir
from numba.core import types
from numba.core.extending import intrinsic

NAMES = ("vload2", "vload4", "vstore2", "vstore4", "address")


def _pointer(context, builder, aryty, ary, i, n):
    data = context.make_array(aryty)(context, builder, ary).data
    vty = ir.VectorType(context.get_data_type(aryty.dtype), n)
    return builder.bitcast(builder.gep(data, [i]), vty.as_pointer()), vty, n * aryty.dtype.bitwidth // 8


def _vload(n):
    @intrinsic
    def vload(typingctx, arr, i):
        def codegen(context, builder, sig, args):
            ptr, _, align = _pointer(context, builder, sig.args[0], args[0], args[1], n)
            v = builder.load(ptr, align=align)
            return context.make_tuple(builder, sig.return_type,
                                      [builder.extract_element(v, ir.Constant(ir.IntType(32), k)) for k in range(n)])
        return types.UniTuple(arr.dtype, n)(arr, i), codegen
    return vload


def _vstore_codegen(n):
    def codegen(context, builder, sig, args):
        ptr, vty, align = _pointer(context, builder, sig.args[0], args[0], args[1], n)
        v = ir.Constant(vty, ir.Undefined)
        for k, (x, t) in enumerate(zip(args[2:], sig.args[2:])):
            x = context.cast(builder, x, t, sig.args[0].dtype)
            v = builder.insert_element(v, x, ir.Constant(ir.IntType(32), k))
        builder.store(v, ptr, align=align)
        return context.get_dummy_value()
    return codegen


@intrinsic
def vstore2(typingctx, arr, i, a, b):
    return types.none(arr, i, a, b), _vstore_codegen(2)


@intrinsic
def vstore4(typingctx, arr, i, a, b, c, d):
    return types.none(arr, i, a, b, c, d), _vstore_codegen(4)


vload2, vload4 = _vload(2), _vload(4)


@intrinsic
def address(typingctx, arr):
    def codegen(context, builder, sig, args):
        return builder.ptrtoint(context.make_array(sig.args[0])(context, builder, args[0]).data, ir.IntType(64))
    return types.int64(arr), codegen


def _sim_vload(n):
    return lambda arr, i: tuple(arr[i + k] for k in range(n))


def _sim_vstore(arr, i, *vals):
    for k, v in enumerate(vals):
        arr[i + k] = v


def _sim_address(arr):
    a = getattr(arr, "_ary", arr)
    return a.__array_interface__["data"][0]


SIM = {"vload2": _sim_vload(2), "vload4": _sim_vload(4), "vstore2": _sim_vstore, "vstore4": _sim_vstore,
       "address": _sim_address}
