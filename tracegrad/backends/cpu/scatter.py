"""The scatter-add of rows (`index_add` along axis 0, the gradient of `weight[ids]`: an embedding's) as
native code in the program's segment, instead of a host step.

out = zeros(shape); out[ids[r]] += g[r] for each r in order: the same additions in the same order as
eager (ops/indexing.py's _add_rows, NumPy's add.at), so the results are identical. A negative index
wraps; one still out of [0, rows) is skipped and recorded as the gathers record theirs (scalar.py's
INDEX_ERROR: the runtime raises eager's IndexError after the call). On W12 (512 ids into a 512 x 128
table, load 3, one thread) the host step took 560-650 us of CPU per call and split the program into two
native segments with a Python step between them.

Planned only for float32/float64 rows (2 or more dims) whose gradient and ids are read contiguously from
offsets known at compile time; sizes may be symbolic (dynamic=True: read from the call's sizes array).
Every other index_add stays a host step (a 1-d one sums by bincount in float64, which this order would
not reproduce)."""
import math

from ...strides import contiguous_strides
from ...symint import is_sym, same_size
from .scalar import INDEX_ERROR
from .sizes import driver_operand

_TYPES = {"float32": "float", "float64": "double"}
_INDEX = {"int32": "i32", "int64": "i64"}


def scatter_plan(kernel, slots):
    """{rows, count, width, ty, ity, g, ids, out (table slots), g_off, ids_off} of a host index_add kernel
    native code can run (see the module), else None. `slots`: a value's buffer slot."""
    n = kernel.node
    if kernel.kind != "host" or n is None or n.op != "index_add" or len(n.inputs) != 2:
        return None
    shape, (g, ids) = tuple(n.attrs["shape"]), n.inputs
    ty, ity = _TYPES.get(n.out.dtype.name), _INDEX.get(ids.dtype.name)
    if tuple(n.attrs["axes"]) != (0,) or len(shape) < 2 or ty is None or ity is None or g.dtype.name != n.out.dtype.name:
        return None
    gl, il = kernel.args
    if (is_sym(gl.offset) or is_sym(il.offset) or len(g.shape) != len(ids.shape) + len(shape) - 1
            or not _same(g.shape, (*ids.shape, *shape[1:])) or not _same(gl.strides, contiguous_strides(g.shape))
            or not _same(il.strides, contiguous_strides(ids.shape))):
        return None
    out = slots[id(n.out)]
    if out in (slots[id(gl.buf)], slots[id(il.buf)]):
        return None
    return dict(rows=shape[0], count=math.prod(ids.shape), width=math.prod(shape[1:]), ty=ty, ity=ity,
                g=slots[id(gl.buf)], ids=slots[id(il.buf)], out=out, g_off=gl.offset, ids_off=il.offset)


def _same(a, b):
    """Whether two shapes or stride tuples agree for every size (records no guard)."""
    return all(same_size(x, y) for x, y in zip(a, b))


def scatter_function(name, p):
    """`void @name(ptr %out, ptr %g, ptr %ids, i64 %rows, i64 %count, i64 %w)`: zero out (rows x w), then add
    g's count rows into it by ids (see the module)."""
    ty, ity = p["ty"], p["ity"]
    size = 4 if ty == "float" else 8
    wrap = "" if ity == "i64" else "  %i = sext i32 %iraw to i64\n"
    raw = "%iraw" if ity == "i32" else "%i"
    err = "".join(f"  store i64 {v}, ptr getelementptr inbounds ([4 x i64], ptr @{INDEX_ERROR}, i64 0, i64 {k})\n"
                  for k, v in enumerate(("1", "%i", "0", "%rows")))
    return f"""define void @{name}(ptr noalias %out, ptr noalias readonly %g0, ptr noalias readonly %ids0, i64 %rows, i64 %count, i64 %w) #1 {{
entry:
  %elems = mul nsw i64 %rows, %w
  %bytes = mul nsw i64 %elems, {size}
  call void @llvm.memset.p0.i64(ptr align {size} %out, i8 0, i64 %bytes, i1 false)
  %g = getelementptr inbounds {ty}, ptr %g0, i64 {p["g_off"]}
  %ids = getelementptr inbounds {ity}, ptr %ids0, i64 {p["ids_off"]}
  %hasrows = icmp sgt i64 %count, 0
  %haswidth = icmp sgt i64 %w, 0
  %any = and i1 %hasrows, %haswidth
  br i1 %any, label %row, label %done
row:
  %r = phi i64 [0, %entry], [%r1, %next]
  %ip = getelementptr inbounds {ity}, ptr %ids, i64 %r
  {raw} = load {ity}, ptr %ip
{wrap}  %neg = icmp slt i64 %i, 0
  %iw = add nsw i64 %i, %rows
  %wr = select i1 %neg, i64 %iw, i64 %i
  %ok = icmp ult i64 %wr, %rows
  br i1 %ok, label %add, label %bad
bad:
{err}  br label %next
add:
  %do = mul nsw i64 %wr, %w
  %dst = getelementptr inbounds {ty}, ptr %out, i64 %do
  %so = mul nsw i64 %r, %w
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
  %cmore = icmp ult i64 %c1, %w
  br i1 %cmore, label %col, label %next
next:
  %r1 = add nuw nsw i64 %r, 1
  %more = icmp ult i64 %r1, %count
  br i1 %more, label %row, label %done
done:
  ret void
}}"""


def scatter_call(c, name, p, symbol_index, sizes_slot):
    """LLVM lines (registers and labels start with `c`) calling @name on the table's buffers of plan `p`,
    symbolic sizes read from the call's sizes array (table slot `sizes_slot`, `symbol_index` its order)."""
    lines = []
    for reg in ("out", "g", "ids"):
        lines += [f"  %{c}{reg}p = getelementptr ptr, ptr %table, i64 {p[reg]}", f"  %{c}{reg} = load ptr, ptr %{c}{reg}p"]
    rows, count, width = (driver_operand(lines, c, p[d], symbol_index, sizes_slot) for d in ("rows", "count", "width"))
    return lines + [f"  call void @{name}(ptr %{c}out, ptr %{c}g, ptr %{c}ids, i64 {rows}, i64 {count}, i64 {width})"]
