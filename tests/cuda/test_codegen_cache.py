"""Generated kernels are built once per source text in a process, and on a GPU numba.cuda's file cache
keeps their compiled code on disk: checked in a process with the real numba.cuda (no simulator; a
dispatcher's cache needs no GPU until it compiles)."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tracegrad.backends.cuda import compile as build

ROOT = Path(__file__).resolve().parents[2]


def test_one_dispatcher_per_source_text():
    body = "def k(b0):\n    b0[0] = float32(1.0)\n"
    assert build.kernel(body, "k") is build.kernel(body, "k")
    assert build.kernel(body.replace("1.0", "2.0"), "k") is not build.kernel(body, "k")


def test_on_a_gpu_the_compiled_code_is_cached_next_to_the_generated_file(tmp_path):
    script = textwrap.dedent("""
        from numba import config
        from tracegrad.backends.cuda import compile as build
        assert not config.ENABLE_CUDASIM
        d = build.kernel("def k(b0):\\n    b0[0] = float32(1.0)\\n", "k")
        print(type(d).__name__, d._cache._cache_path, d.py_func.__code__.co_filename)
    """)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["TRACEGRAD_CACHE_DIR"] = str(tmp_path)
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    kind, cache_dir, source = r.stdout.split()
    assert kind == "CUDADispatcher"
    assert Path(source).parent == tmp_path / "cuda" and Path(source).read_text().startswith("# tracegrad")
    assert Path(cache_dir) == tmp_path / "cuda" / "__pycache__"
