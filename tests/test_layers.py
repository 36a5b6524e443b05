"""Imports run downward: no module imports one above it, so no two modules import each other."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "tracegrad"

# module -> the tracegrad modules it must not import (at any depth of the file): the layers above it
ABOVE = {
    # the scalar-expression vocabulary: a leaf the table's lowerings and every code generator import
    "scalar": ["core", "ops", "autograd", "tensor", "composites", "forward", "trace", "ir", "jit", "codegen", "cuda"],
    "modes": ["core", "ops", "autograd", "tensor", "composites", "forward", "trace", "ir", "jit"],
    "autograd": ["tensor", "composites", "forward", "trace", "functional", "ir", "jit", "nn", "optim"],
    "tensor": ["forward", "trace", "functional", "ir", "jit", "nn", "optim"],     # its class calls composites
    # device arrays and eager device kernels: below the tensors that hold them (tensor/ calls cuda/)
    "cuda": ["autograd", "tensor", "composites", "forward", "trace", "functional", "jit", "nn", "optim"],
    "composites": ["forward", "trace", "functional", "ir", "jit", "nn", "optim"],
    "convolution": ["forward", "trace", "functional", "ir", "jit", "nn", "optim", "pooling", "resample"],
    "pooling": ["forward", "trace", "functional", "ir", "jit", "nn", "optim", "resample"],
    "resample": ["forward", "trace", "functional", "ir", "jit", "nn", "optim", "convolution", "pooling"],
    "forward": ["trace", "functional", "ir", "jit", "nn", "optim"],
    "trace": ["functional", "ir", "jit", "nn", "optim"],
}


def _imports(path, package):
    """The tracegrad modules a file imports, as dotted names relative to tracegrad."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target + "." + a.name for a in node.names] + [target]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        out.update(n[len("tracegrad."):] for n in names if n.startswith("tracegrad."))
    return out


def _files(name):
    p = ROOT / name
    return sorted(p.rglob("*.py")) if p.is_dir() else [p.with_suffix(".py")]


def test_lower_layers_import_nothing_from_above():
    bad = []
    for low, highs in ABOVE.items():
        for path in _files(low):
            parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
            package = parts[:-1]            # a package's __init__ and its modules resolve `.` alike
            for imported in _imports(path, package):
                top = imported.split(".")[0]
                if top in highs:
                    bad.append(f"{path.relative_to(ROOT.parent)} imports tracegrad.{imported}")
    assert not bad, "imports must run downward:\n" + "\n".join(bad)


def test_leaves_import_nothing_from_tracegrad():
    """Modules every layer may use: symexpr imports no tracegrad module, symint only symexpr."""
    for leaf, allowed in [("symexpr", set()), ("symint", {"symexpr", "symexpr.Expr", "symexpr.parse_expr"})]:
        got = _imports(ROOT / f"{leaf}.py", ["tracegrad"])
        assert got <= allowed, f"tracegrad/{leaf}.py imports {sorted(got - allowed)}"
