"""The cuda target plans its own kernels (issue 25, item 1): no module of tracegrad/backends/cuda imports
the CPU target's code generator, planner or scheduler, at any depth of its file (tests/test_layers.py's
import reader)."""
from test_layers import MODULES, imports

# the CPU target: its backend, code generator and planner (backends/cpu/plan/: walk orders, pinning of sizes)
CPU = ("backends.cpu",)


def _cpu(module):
    return any(module == p or module.startswith(p + ".") for p in CPU)


def test_the_cuda_backend_imports_nothing_of_the_cpu_target():
    cuda = [m for m in MODULES if m == "backends.cuda" or m.startswith("backends.cuda.")]
    assert "backends.cuda.plan" in cuda and "backends.cuda.emit.skeletons" in cuda
    bad = [f"tracegrad.{m} imports tracegrad.{t}" for m in cuda for t in sorted(imports(m)) if _cpu(t)]
    assert not bad, "the cuda target must not use the CPU's planner or code generator:\n" + "\n".join(bad)


def test_the_check_sees_a_cpu_import():
    """The rule itself: the CPU schedule and code generator count, the shared program planning (lowering/) does not."""
    assert _cpu("backends.cpu.plan.order") and _cpu("backends.cpu.llvm") and _cpu("backends.cpu.plan")
    assert not _cpu("lowering.slots") and not _cpu("ir.layout") and not _cpu("backends.cuda.plan")
    assert "backends.cpu.plan" in imports("backends.cpu.build")
