"""A fork taken while other threads compile leaves the child a working tracegrad: every lock comes
from tracegrad/locks.py (freed in the child) and the garbage collector's pause, counted per thread,
ends with the threads the child does not have. What is tested is a hang, so the child has a
generous alarm (SIGALRM kills it: a failure, never a hung suite)."""
import ast
import pathlib

import hangs
import pytest
from test_runtime_safety import _python

import tracegrad

FORK_WHILE_COMPILING = """
    import gc, os, signal, sys, threading
    import tracegrad as tg
    n_threads, child_call, alarm = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    started, release = threading.Semaphore(0), threading.Event()

    def slow(x):                # its trace waits: the thread holds the function's lock and a gc pause
        started.release()
        release.wait()
        return x * 2.0
    f = tg.compile(slow)
    threads = [threading.Thread(target=f, args=(tg.ones(3 + k),)) for k in range(n_threads)]
    for t in threads:
        t.start()
    started.acquire()
    assert not gc.isenabled()
    pid = os.fork()
    if pid == 0:
        signal.alarm(alarm)     # a hang is killed here: the exit status says so
        try:
            ok = gc.isenabled()
            release.set()       # the child's own copy: its trace of slow goes straight through
            x = tg.arange(3.0) if child_call == "same signature" else tg.arange(4.0)    # the thread's is ones(3)
            y = tg.compile(lambda x: x + x)(x) if child_call == "another function" else f(x)
            ok = ok and y.tolist() == (x * 2.0).tolist() and gc.isenabled()
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    release.set()
    for t in threads:
        t.join()
    print(os.waitstatus_to_exitcode(status), gc.isenabled())
"""


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("child_call", ["same function", "same signature", "another function"])
def test_fork_while_another_thread_compiles(n_threads, child_call):
    res = _python(FORK_WHILE_COMPILING, timeout=hangs.limit(30),    # quiet: 2-3 s (a compile in the child)
                  args=[str(n_threads), child_call, str(int(hangs.limit(12)))])
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ["0", "True"], (res.stdout, res.stderr[-3000:])


def test_every_lock_comes_from_the_fork_safe_registry():
    """The class: no module makes a lock of its own (a forked child could find it held for good)."""
    root = pathlib.Path(tracegrad.__file__).parent
    made = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "locks.py" and path.parent == root:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("Lock", "RLock", "allocate_lock", "Condition"):
                made.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not made, "make locks with tracegrad.locks.lock() / rlock():\n" + "\n".join(made)
