"""The scatter-add of rows (`index_add` along axis 0, the gradient of `weight[ids]`: an embedding's) as
native code in the program's segment, instead of a host step.

out = zeros(shape); out[ids[r]] += g[r] for each r in order: the same additions in the same order as
eager (ops/indexing.py's _add_rows, NumPy's add.at), so the results are identical. A negative index
wraps; one still out of [0, rows) is skipped and recorded as the gathers record theirs (scalar.py's
INDEX_ERROR: the runtime raises eager's IndexError after the call). On W12 (512 ids into a 512 x 128
table, load 3, one thread) the host step took 560-650 us of CPU per call and split the program into two
native segments with a Python step between them.

Planned only for float32/float64 rows (2 or more dims, sizes known at compile time) whose gradient and
ids are read contiguously; every other index_add stays a host step (a 1-d one sums by bincount in
float64, which this order would not reproduce)."""
import math

from ...strides import contiguous_strides
from ...symint import is_sym
from .scalar import INDEX_ERROR

_TYPES = {"float32": "float", "float64": "double"}
_INDEX = {"int32": "i32", "int64": "i64"}


def scatter_plan(kernel, slots):
    """{rows, count, width, ty, ity, g, ids, out (table slots), g_off, ids_off} of a host index_add kernel
    native code can run (see the module), else None. `slots`: a value's buffer slot."""
    n = kernel.node
    if kernel.kind != "host" or n is None or n.op != "index_add" or len(n.inputs) != 2:
        return None
    shape, (g, ids) = tuple(n.attrs["shape"]), n.inputs
    if tuple(n.attrs["axes"]) != (0,) or len(shape) < 2 or any(is_sym(d) for d in (*shape, *g.shape, *ids.shape)):
        return None
    ty, ity = _TYPES.get(n.out.dtype.name), _INDEX.get(ids.dtype.name)
    if ty is None or ity is None or g.dtype.name != n.out.dtype.name:
        return None
    gl, il = kernel.args
    count, width = math.prod(ids.shape), math.prod(shape[1:])
    if (count == 0 or width == 0 or tuple(g.shape) != tuple(ids.shape) + shape[1:]
            or gl.strides != contiguous_strides(g.shape) and count * width > 1
            or il.strides != contiguous_strides(ids.shape) and count > 1):
        return None
    out = slots[id(n.out)]
    if out in (slots[id(gl.buf)], slots[id(il.buf)]):
        return None
    return dict(rows=shape[0], count=count, width=width, ty=ty, ity=ity, g=slots[id(gl.buf)],
                ids=slots[id(il.buf)], out=out, g_off=gl.offset, ids_off=il.offset)


def scatter_function(name, p):
    """`void @name(ptr %out, ptr %g, ptr %ids)`: zero out, then add g's rows into it by ids (see the module)."""
    ty, ity, w = p["ty"], p["ity"], p["width"]
    size = 4 if ty == "float" else 8
    wrap = "" if ity == "i64" else "  %i = sext i32 %iraw to i64\n"
    raw = "%iraw" if ity == "i32" else "%i"
    err = "".join(f"  store i64 {v}, ptr getelementptr inbounds ([4 x i64], ptr @{INDEX_ERROR}, i64 0, i64 {k})\n"
                  for k, v in enumerate(("1", "%i", "0", str(p["rows"]))))
    return f"""define void @{name}(ptr noalias %out, ptr noalias readonly %g0, ptr noalias readonly %ids0) #1 {{
entry:
  call void @llvm.memset.p0.i64(ptr align {size} %out, i8 0, i64 {p["rows"] * w * size}, i1 false)
  %g = getelementptr inbounds {ty}, ptr %g0, i64 {p["g_off"]}
  %ids = getelementptr inbounds {ity}, ptr %ids0, i64 {p["ids_off"]}
  br label %row
row:
  %r = phi i64 [0, %entry], [%r1, %next]
  %ip = getelementptr inbounds {ity}, ptr %ids, i64 %r
  {raw} = load {ity}, ptr %ip
{wrap}  %neg = icmp slt i64 %i, 0
  %iw = add nsw i64 %i, {p["rows"]}
  %w = select i1 %neg, i64 %iw, i64 %i
  %ok = icmp ult i64 %w, {p["rows"]}
  br i1 %ok, label %add, label %bad
bad:
{err}  br label %next
add:
  %do = mul nsw i64 %w, {w}
  %dst = getelementptr inbounds {ty}, ptr %out, i64 %do
  %so = mul nsw i64 %r, {w}
  %src = getelementptr inbounds {ty}, ptr %g, i64 %so
  br label %col
col:
  %c = phi i64 [0, %add], [%c1, %col]
  %dp = getelementptr inbounds {ty}, ptr %dst, i64 %c
  %sp = getelementptr inbounds {ty}, ptr %src, i64 %c
  %dv = load {ty}, ptr %dp
  %sv = load {ty}, ptr %sp
  %sum = fadd {ty} %dv, %sv
  store {ty} %sum, ptr %dp
  %c1 = add nuw nsw i64 %c, 1
  %cmore = icmp ult i64 %c1, {w}
  br i1 %cmore, label %col, label %next
next:
  %r1 = add nuw nsw i64 %r, 1
  %more = icmp ult i64 %r1, {p["count"]}
  br i1 %more, label %row, label %done
done:
  ret void
}}"""


def scatter_call(c, name, p):
    """LLVM lines (registers and labels start with `c`) calling @name on the table's buffers of plan `p`."""
    lines = []
    for reg in ("out", "g", "ids"):
        lines += [f"  %{c}{reg}p = getelementptr ptr, ptr %table, i64 {p[reg]}", f"  %{c}{reg} = load ptr, ptr %{c}{reg}p"]
    return lines + [f"  call void @{name}(ptr %{c}out, ptr %{c}g, ptr %{c}ids)"]
