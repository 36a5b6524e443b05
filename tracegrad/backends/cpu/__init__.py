"""The CPU backend: fused kernels to LLVM (llvm.py), compiled once per module (engine.py) with a disk
cache (lowering/cache.py), run by runtime.py."""
from .build import build_programs

__all__ = ["build_programs"]
