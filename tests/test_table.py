"""The primitive table is the only registry: every primitive declares every field, lowerings speak
the shared vocabulary and match the NumPy implementation, and no other module keeps its own list
of op names."""
import ast
import inspect
import pathlib

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import core, scalar
from tracegrad.backends.cpu import mathlib
from tracegrad.backends.cpu import scalar as llvm_scalar
from tracegrad.backends.cuda.emit import expr as cuda_expr
from tracegrad.backends.cpu.scalar import Emitter
from tracegrad.ops import PRIMS, bind

ROOT = pathlib.Path(tg.__file__).parent
FIELDS = ("name", "kind", "rule", "impl", "vjp", "jvp", "save", "save_out", "lower", "dtypes", "cost", "remap")
OPERANDS = "abc"


def _lowering_names(expr):
    """(operand names, names of the called functions) of a lowering expression."""
    return ({x.name for x in scalar.walk(expr) if isinstance(x, scalar.Arg)},
            {f.name for f in scalar.calls(expr)})


@pytest.mark.parametrize("name", sorted(PRIMS))
def test_every_primitive_declares_every_field(name):
    p = PRIMS[name]
    for field in FIELDS:
        assert hasattr(p, field), f"{name} lacks {field}"
    assert p.name == name and p.kind in core.KINDS and callable(p.rule) and callable(p.impl)
    assert p.vjp is None or callable(p.vjp) or all(r is None or callable(r) for r in p.vjp)
    assert p.jvp is None or callable(p.jvp)
    assert p.jvp is None or p.vjp is not None, f"{name}: forward mode without reverse mode"
    assert isinstance(p.save, (tuple, dict, range)) or callable(p.save)
    assert p.save_out in (True, False)
    assert (p.kind == "view") == callable(p.remap), f"{name}: a view, and only a view, has a remap"
    if p.lower is None:
        assert p.cost is None and p.dtypes == ()
        return
    assert p.kind in ("elementwise", "reduction"), f"{name}: only elementwise ops and reductions lower"
    assert p.cost in core.COSTS and p.dtypes and set(p.dtypes) <= set(core.ALL)
    operands, calls = _lowering_names(p.lower)
    assert operands <= set(OPERANDS), f"{name}: {p.lower} reads {operands}"
    assert p.cost == scalar.cost(p.lower)
    if p.cost == "transcendental":
        assert calls & set(mathlib.FUNCS), f"{name}: transcendental, but calls no math-library function"
    if p.kind == "reduction":
        assert operands == {"a", "b"}, f"{name}: a reduction joins an element b to the accumulator a"


@pytest.mark.parametrize("name", sorted(scalar.FUNCS))
def test_every_vocabulary_function_has_a_lowering_on_every_target(name):
    """LLVM: an instruction (the emitter's operator table), an inline _fn_<name>, or the math library's
    float32 and float64 routines; cuda: an operator, an inline _fn_<name>, or math.<cuda> whose host
    function the simulator runs."""
    fn = scalar.FUNCS[name]
    assert fn in llvm_scalar._OPERATORS or hasattr(Emitter, "_fn_" + name) or fn.routine in mathlib.FUNCS, name
    assert fn.cost != "transcendental" or fn.routine in mathlib.FUNCS, name
    assert (fn in cuda_expr._COMPARE + cuda_expr._ARITHMETIC + (scalar.NEG, scalar.NOT)
            or hasattr(cuda_expr._Translate, "_fn_" + name) or fn.cuda is not None), name
    assert fn.cuda is None or callable(fn.host)


def test_lowerings_are_typed_and_print_as_written():
    from tracegrad.scalar import a, b, c
    assert str(scalar.where(scalar.ne(b, b), b, a * scalar.log(b))) == "where(b != b, b, a * log(b))"
    assert str((a | b) - (a & b)) == "(a | b) - (a & b)" and str(-a - 1) == "-a - 1"
    assert scalar.head(a - b) is scalar.SUB and scalar.head(b - a) is None and scalar.head(scalar.exp(a)) is scalar.exp
    assert scalar.arity(scalar.where(a, b, c)) == 3 and scalar.cost(scalar.maximum(a, 0)) == "cheap"
    with pytest.raises(TypeError, match="takes 2 operands"):
        scalar.maximum(a)
    with pytest.raises(ValueError, match="math-library routine"):
        scalar.fn("made_up", 1, "transcendental", cuda="made_up", host=np.exp)     # no routine: refused
    with pytest.raises(ValueError, match="declared twice"):
        scalar.fn("exp", 1, "transcendental", routine="exp", cuda="exp", host=np.exp)
    assert "made_up" not in scalar.FUNCS
    with pytest.raises(TypeError, match="scalar expression"):
        core.Prim("x", "elementwise", None, None, vjp=None, jvp=None, save=(), save_out=False,
                  lower="a + b", dtypes=("float32",), cost="cheap")
    with pytest.raises(ValueError, match="cost"):
        core.Prim("x", "elementwise", None, None, vjp=None, jvp=None, save=(), save_out=False,
                  lower=scalar.exp(a), dtypes=("float32",), cost="cheap")


def test_prim_refuses_missing_or_inconsistent_fields():
    with pytest.raises(TypeError):
        core.Prim("x", "elementwise", None, None, vjp=None, jvp=None, save=(), save_out=False, lower=scalar.a)
    with pytest.raises(ValueError, match="come together"):
        core.Prim("x", "elementwise", None, None, vjp=None, jvp=None, save=(), save_out=False,
                  lower=scalar.a, dtypes=(), cost="cheap")
    with pytest.raises(ValueError, match="kind"):
        core.Prim("x", "movement", None, None, vjp=None, jvp=None, save=(), save_out=False,
                  lower=None, dtypes=(), cost=None)


def _sample(dtype, shape, rng):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("int"):
        return rng.integers(1, 5, shape).astype(dtype)
    return rng.uniform(0.25, 2.0, shape).astype(dtype)


def _call(p, d, rng):
    """(arrays, attrs) for primitive p with operands of dtype d (a bool condition for `where`), or
    None when p's type rule refuses them."""
    arity = scalar.arity(p.lower)
    attrs = {"dtype": tg.int32 if d == "float64" else tg.float64} if "dtype" in inspect.signature(p.rule).parameters else {}
    for first in (d, "bool"):
        arrays = [_sample(first if i == 0 else d, (3, 4), rng) for i in range(arity)]
        try:
            p.rule([a.shape for a in arrays], [tg.dtypes.from_numpy(a.dtype) for a in arrays], **attrs)
        except TypeError:
            continue
        return arrays, attrs
    return None


LOWERED = sorted(n for n, p in PRIMS.items() if p.lower is not None and p.kind == "elementwise")


@pytest.mark.parametrize("dtype", core.ALL)
def test_each_lowering_matches_the_numpy_implementation(dtype):
    """Compiled (each primitive's scalar lowering, through LLVM; one program per dtype) against the
    primitive's own NumPy impl: a new elementwise primitive is tested here by being in the table."""
    rng = np.random.default_rng(0)
    calls = {n: c for n in LOWERED if dtype in PRIMS[n].dtypes and (c := _call(PRIMS[n], dtype, rng))}
    arrays = [a for arrs, _ in calls.values() for a in arrs]

    def program(*xs):
        out, k = [], 0
        for n, (arrs, attrs) in calls.items():
            out.append(bind(n, *xs[k:k + len(arrs)], **attrs))
            k += len(arrs)
        return tuple(out)
    f, xs = tg.compile(program), [tg.from_numpy(a) for a in arrays]
    got = f(*xs)
    assert "[host]" not in f.ir(*xs, stage="kernels")          # every op went through its lowering
    for (n, (arrs, attrs)), g in zip(calls.items(), got):
        want = PRIMS[n].impl(*arrs, **attrs)
        tol = 2e-6 if want.dtype == np.float32 else 1e-12
        assert g.dtype.name == want.dtype.name, n
        np.testing.assert_allclose(g.numpy(), want, rtol=tol, atol=tol, err_msg=f"{n} on {dtype}")


def test_every_lowered_primitive_is_checked_for_some_dtype():
    rng = np.random.default_rng(0)
    assert [n for n in LOWERED if not any(_call(PRIMS[n], d, rng) for d in PRIMS[n].dtypes)] == []


# ------------------------------------------------------------------ no second registry

def _prim_name_collections(path):
    """(line, names) of every tuple/list/set/dict literal in `path` naming two or more primitives."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            elts = node.elts
        elif isinstance(node, ast.Dict):
            elts = [k for k in node.keys if k is not None]
        else:
            continue
        names = [e.value for e in elts if isinstance(e, ast.Constant) and e.value in PRIMS]
        if len(names) >= 2:
            out.append((node.lineno, names))
    return out


def test_no_module_outside_the_table_lists_op_names():
    """The compiler, runtime and tensor code ask the table. (The fuzzer, tracegrad/fuzz, writes user
    programs from the public API's method names, which it lists as a user would; not scanned.)"""
    table = {ROOT / "core.py"} | set((ROOT / "ops").glob("*.py"))
    fuzz = ROOT / "fuzz"
    offenders = [f"{path.relative_to(ROOT.parent)}:{line}: {names}"
                 for path in sorted(ROOT.rglob("*.py")) if path not in table and fuzz not in path.parents
                 for line, names in _prim_name_collections(path)]
    assert not offenders, ("sets of primitives belong in the table (a field of each prim), not in "
                           "a module of their own:\n" + "\n".join(offenders))


def test_the_scan_finds_a_list_of_op_names(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('HEAVY = ("exp", "log")\nok = ("x", "exp")\nd = {"sum": 1, "max": 2}\n')
    assert [line for line, _ in _prim_name_collections(f)] == [1, 3]


# ------------------------------------------------------------------ kinds: views alias, copies do not

def test_cat_is_a_copy_so_in_place_updates_compile():
    a, b = tg.tensor([1.0, 2.0]), tg.tensor([3.0, 4.0, 5.0])
    f = tg.compile(lambda a, b: tg.cat([a, b]).mul_(2))
    np.testing.assert_array_equal(f(a, b).numpy(), tg.cat([a, b]).mul_(2).numpy())
    np.testing.assert_array_equal(a.numpy(), [1.0, 2.0])          # the inputs are untouched


SHAPE_OPS = {"reshape": lambda x: bind("reshape", x, shape=(4, 3)),      # a call of each view and copy
             "permute": lambda x: bind("permute", x, perm=(1, 0)),
             "expand": lambda x: bind("expand", x, shape=(2, 3, 4)),
             "slice": lambda x: bind("slice", x, index=((0, 2, 1),)),
             "unslice": lambda x: bind("unslice", x, shape=(5, 4), index=((1, 4, 1),)),
             "cat": lambda x: bind("cat", x, x, axis=0),
             "windows": lambda x: bind("windows", x, axes=(1,), size=(2,), step=(2,), dilation=(1,)),
             "diagonal": lambda x: bind("diagonal", x, k=1, dim1=0, dim2=1)}


def test_every_view_and_copy_has_a_sample():
    assert set(SHAPE_OPS) == {n for n, p in PRIMS.items() if p.kind in ("view", "copy")}


@pytest.mark.parametrize("name", sorted(SHAPE_OPS))
def test_only_views_alias_and_in_place_on_them_compiles_as_eager(name):
    """The kind decides: a view shares its input's memory (eager writes go through it into the input;
    compiled code writes the updated input back, the same), any other result is new memory that
    compiled code updates in place exactly as eager does, leaving the input alone. An expanded view
    refuses in-place writes in both. A reshape is a view or a copy as the memory layout decides; the
    trace knows the layout, so it is the same one compiled (and of a transposed input, a copy)."""
    op, view = SHAPE_OPS[name], PRIMS[name].kind == "view"
    x = tg.tensor(np.arange(12.0).reshape(3, 4))
    out = op(x)
    assert np.may_share_memory(out.numpy(), x.numpy()) == view
    f = tg.compile(lambda x: op(x).mul_(2.0))
    if name == "reshape":      # of a transposed input a copy, eagerly and compiled: x.T stays as it was
        xt, xt_eager = x.clone().T, x.clone().T
        np.testing.assert_array_equal(f(xt).numpy(), op(xt_eager).mul_(2.0).numpy())
        np.testing.assert_array_equal(xt.numpy(), xt_eager.numpy())
    if name == "expand":
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
            op(x).mul_(2.0)
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
            f(x)
        return
    x_eager = x.clone()
    want = op(x_eager).mul_(2.0)
    np.testing.assert_array_equal(f(x).numpy(), want.numpy())
    np.testing.assert_array_equal(x.numpy(), x_eager.numpy())
    if not view:
        np.testing.assert_array_equal(x.numpy(), np.arange(12.0).reshape(3, 4))


VIEW_CALLS = [("reshape", {"shape": (8, 2, 4)}), ("reshape", {"shape": (64,)}), ("permute", {"perm": (1, 0)}),
              ("expand", {"shape": (3, 8, 8)}), ("slice", {"index": ((1, 7, 2), (0, 8, 3))}),
              ("windows", {"axes": (0, 1), "size": (3, 2), "step": (2, 1), "dilation": (1, 3)}),
              ("diagonal", {"k": 2, "dim1": 1, "dim2": 0}), ("diagonal", {"k": -3, "dim1": 0, "dim2": 1})]


def test_every_view_has_a_remap_sample():
    assert {n for n, _ in VIEW_CALLS} == {n for n, p in PRIMS.items() if p.kind == "view"}


@pytest.mark.parametrize("name, attrs", VIEW_CALLS)
def test_each_view_remap_matches_numpy(name, attrs):
    """A view's remap places its elements where NumPy's view of the same buffer has them, read
    from a transposed, offset buffer (the layout fusion meets); None only where NumPy copies."""
    flat = np.arange(200.0)
    base = flat.reshape(10, 20)[1:9, 2:17:2].T                 # (8, 8): strides (2, 20), offset 22
    strides, offset = [s // flat.itemsize for s in base.strides], 22
    want = PRIMS[name].impl(base, **attrs)
    out_shape = PRIMS[name].rule([base.shape], [tg.float64], **attrs)[0]
    moved = PRIMS[name].remap(base.shape, out_shape, strides, offset, **attrs)
    if moved is None:
        assert not np.shares_memory(want, base)
        return
    s, off = moved
    got = np.lib.stride_tricks.as_strided(flat[off:], out_shape, [k * flat.itemsize for k in s])
    np.testing.assert_array_equal(got, want)
