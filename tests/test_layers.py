"""Imports run downward: every module under tracegrad/ has a layer (LAYERS, lowest first, as
DESIGN.md orders them), no module imports one of a higher layer (at any depth of the file: a
function-level import counts), and no modules import each other (a cycle of any length)."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "tracegrad"

# Lowest first. An entry names a module ("tensor.base") or a package with everything under it ("ops.").
# A module of a layer may import modules of its own layer and of the layers before it.
LAYERS = [
    ("leaves", ["_version", "dtypes", "device", "broadcast", "pytree", "strides", "scalar", "errors", "locks",
                "logs", "modes", "size", "return_types", "printing", "hooks", "symexpr", "symguard", "symint"]),
    ("core", ["core", "generator"]),
    ("ops", ["ops", "ops."]),
    # device memory and the eager device kernels that eager tensors hold and call (no compiler)
    ("device arrays", ["backends", "backends.mps", "backends.cuda", "backends.cuda.gpu", "backends.cuda.arrays",
                       "backends.cuda.memory", "backends.cuda.allocator", "backends.cuda.eager",
                       "backends.cuda.eager.kernels", "backends.cuda.eager.matmul", "backends.cuda.eager.argreduce",
                       "backends.cuda.eager.rounding", "backends.cuda.eager.blockscan", "backends.cuda.info"]),
    ("autograd", ["autograd", "forward"]),
    ("eager tensors", ["tensor.base", "tensor.dispatch", "tensor.factories", "tensor.functions", "tensor.indexing",
                       "tensor.inplace", "tensor.direct", "tensor.typed"]),
    ("composites", ["composites", "composites.", "convolution", "pooling", "resample"]),
    ("tensor class", ["tensor.reduce_methods", "tensor.named_methods", "tensor.declared", "tensor.tensor_class",
                      "tensor", "function_forms", "custom_function", "functional", "trace", "trace_indices", "frozen_draws",
                      "torch_format", "serialization"]),
    ("ir", ["ir", "ir."]),
    ("viz", ["viz", "viz."]),           # draws eager graphs and the IR; jit's introspection uses it
    ("lowering", ["lowering", "lowering."]),
    ("backends", ["backends.cpu", "backends.cpu.", "backends.cuda.lower", "backends.cuda.compile", "backends.cuda.program", "backends.cuda.run",
                  "backends.cuda.ptxcheck", "backends.cuda.plan", "backends.cuda.sizes", "backends.cuda.emit", "backends.cuda.emit.",
                  "backends.cuda.eager.pointwise", "backends.cuda.eager.scan", "backends.cuda.eager.generated"]),
    ("jit", ["jit", "jit."]),
    # what models and training loops use; below the package's __init__, which exposes them (tg.nn, tg.optim)
    ("models", ["nn", "nn.", "optim", "optim.", "utils", "utils.", "distributed", "distributed."]),
    ("public", ["__init__", "cuda"]),
    ("tools", ["bench", "bench.", "fuzz", "fuzz.", "__main__"]),
]

# (importer, imported) pairs allowed to point upward, each with its reason; the list may only shrink.
UPWARD = {}

# Circles of modules known to import each other, each with its reason; the list may only shrink.
KNOWN_CYCLES = set()


def _modules():
    """Every module's dotted name (relative to tracegrad; the package itself is "__init__") -> its file."""
    out = {}
    for p in sorted(ROOT.rglob("*.py")):
        parts = p.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name or "__init__"] = p
    return out


MODULES = _modules()


def _package(name, path):
    """The dotted package (absolute) that a file's `.` names."""
    parts = ["tracegrad"] + ([] if name == "__init__" else name.split("."))
    return parts if path.name == "__init__.py" else parts[:-1]


def _module_of(dotted):
    """The tracegrad module an absolute dotted name is or lies in (None: not tracegrad's)."""
    if dotted == "tracegrad":
        return "__init__"
    if not dotted.startswith("tracegrad."):
        return None
    name = dotted[len("tracegrad."):]
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or "__init__"


def imports(name):
    """The tracegrad modules module `name` imports anywhere in its file."""
    path = MODULES[name]
    package = _package(name, path)
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else node.module or ""
            for a in node.names:           # `from pkg import mod` imports mod; `from mod import name`, mod
                sub = _module_of(base + "." + a.name)
                out.add(sub if sub is not None and sub.endswith(a.name) and sub != "__init__" else _module_of(base))
        elif isinstance(node, ast.Import):
            out.update(_module_of(a.name) for a in node.names)
    out.discard(None)
    out.discard(name)
    return out


def layer_of(name):
    """The index in LAYERS of the longest entry naming `name` (None: not placed)."""
    best = None
    for i, (_, entries) in enumerate(LAYERS):
        for e in entries:
            if (name == e or (e.endswith(".") and name.startswith(e))) and (best is None or len(e) > best[1]):
                best = (i, len(e))
    return None if best is None else best[0]


def test_every_module_has_a_layer():
    missing = [m for m in MODULES if layer_of(m) is None]
    assert not missing, "place these modules in a layer of tests/test_layers.py's LAYERS: " + ", ".join(missing)


def test_imports_point_downward():
    bad = []
    for m in MODULES:
        for t in sorted(imports(m)):
            if layer_of(m) is not None and layer_of(t) is not None and layer_of(t) > layer_of(m) \
                    and (m, t) not in UPWARD:
                bad.append(f"tracegrad.{m} ({LAYERS[layer_of(m)][0]}) imports tracegrad.{t} ({LAYERS[layer_of(t)][0]})")
    assert not bad, "imports must run downward:\n" + "\n".join(bad)
    unused = [e for e in UPWARD if e[1] not in imports(e[0])]
    assert not unused, f"these upward imports are gone: remove them from UPWARD: {unused}"


def test_no_import_cycles():
    """Tarjan's strongly connected components of the import graph: each must be one module."""
    graph = {m: imports(m) for m in MODULES}
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for m in graph:
        if m not in index:
            visit(m)
    unknown = [c for c in cycles if tuple(c) not in KNOWN_CYCLES]
    gone = KNOWN_CYCLES - {tuple(c) for c in cycles}
    assert not gone, f"these circles are gone: remove them from KNOWN_CYCLES: {sorted(gone)}"
    assert not unknown, "modules that import each other (directly or around a circle):\n" + "\n".join(
        " <-> ".join(c) for c in unknown)


def test_the_checker_sees_function_level_and_relative_imports():
    """The import reader itself: a function-level import inside tensor/dispatch.py and `from .. import x`."""
    assert "backends.cuda.memory" in imports("tensor.dispatch")
    assert "dtypes" in imports("tensor.dispatch")
    assert "backends.cuda.eager.kernels" in imports("tensor.dispatch")      # imported inside a function
    assert layer_of("tensor.base") < layer_of("ir.graph") < layer_of("jit.function") < layer_of("nn.modules")


def test_leaves_import_nothing_from_tracegrad():
    """Modules every layer may use: symexpr imports no tracegrad module, symguard only symexpr, symint only
    those two."""
    assert imports("symexpr") == set()
    assert imports("symguard") <= {"symexpr"}, imports("symguard")
    assert imports("symint") <= {"symexpr", "symguard"}, imports("symint")


def test_import_tracegrad_loads_neither_numba_cuda_nor_the_cuda_compiler():
    """The cuda backend's lower layer is imported with tracegrad; numba.cuda and the compiler on first use."""
    import os
    import subprocess
    import sys
    code = ("import sys, tracegrad\n"
            "print(sorted(m for m in ('numba.cuda', 'tracegrad.backends.cuda.plan', 'tracegrad.backends.cuda.lower',"
            " 'tracegrad.backends.cuda.eager.kernels') if m in sys.modules))")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT.parent, env=dict(env, PYTHONPATH=str(ROOT.parent)),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "[]", r.stdout
