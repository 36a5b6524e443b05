"""Test-wide settings: compiled code goes to a private disk cache, not the user's. The CUDA tests
(tests/cuda/) run in their own process under numba's simulator (tests/test_cuda_sim.py starts it):
they are collected only when NUMBA_ENABLE_CUDASIM=1 is set (or TRACEGRAD_CUDA_TESTS=1, on a GPU)."""
import os
import tempfile

os.environ.setdefault("TRACEGRAD_CACHE_DIR", tempfile.mkdtemp(prefix="tracegrad-test-cache-"))

collect_ignore = [] if "1" in (os.environ.get("NUMBA_ENABLE_CUDASIM"), os.environ.get("TRACEGRAD_CUDA_TESTS")) \
    else ["cuda"]
