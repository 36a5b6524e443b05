"""The cuda target plans its own kernels (issue 25, item 1): no module of tracegrad/backends/cuda imports
the CPU target's code generator, planner or scheduler, at any depth of its file (tests/test_layers.py's
import reader)."""
from test_layers import MODULES, imports

# the CPU target: its backend, its code generator, and the CPU schedule with its pinning of sizes
CPU = ("backends.cpu", "codegen", "ir.passes.schedule", "ir.passes.sized")
# target-free program planning that still lives in codegen/ until it moves to a shared home (item 2)
SHARED = {"codegen.buffers", "codegen.slots", "codegen.cache", "codegen.forksafe"}


def _cpu(module):
    return module not in SHARED and any(module == p or module.startswith(p + ".") for p in CPU)


def test_the_cuda_backend_imports_nothing_of_the_cpu_target():
    cuda = [m for m in MODULES if m == "backends.cuda" or m.startswith("backends.cuda.")]
    assert "backends.cuda.plan" in cuda and "backends.cuda.emit.skeletons" in cuda
    bad = [f"tracegrad.{m} imports tracegrad.{t}" for m in cuda for t in sorted(imports(m)) if _cpu(t)]
    assert not bad, "the cuda target must not use the CPU's planner or code generator:\n" + "\n".join(bad)


def test_the_check_sees_a_cpu_import():
    """The rule itself: the CPU schedule and code generator count, the shared slots do not."""
    assert _cpu("ir.passes.schedule") and _cpu("codegen.llvm") and _cpu("backends.cpu.plan")
    assert not _cpu("codegen.slots") and not _cpu("ir.layout") and not _cpu("backends.cuda.plan")
    assert "ir.passes.schedule" in imports("ir.passes.fusion")
