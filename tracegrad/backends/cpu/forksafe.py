"""Fork safety of the compiled-code runtime. Its locks come from `lock()` (tracegrad/locks.py: a
forked child finds them free; each guards state that the next holder rebuilds before use: a
program's pointer table and scratch buffers are rewritten by every call).

llvmlite runs every LLVM call under one process-wide lock; the parent takes it just before forking
(waiting for an LLVM call in another thread to finish), so the child never inherits LLVM halfway
through a compile, and both sides release it after the fork."""
import os

from llvmlite.binding import ffi

from ...locks import lock  # noqa: F401  (the runtime's locks)


def _llvm_lock():
    return getattr(getattr(ffi.lib, "_lock", None), "_lock", None)   # llvmlite's RLock, if it has one


def _before_fork():
    held = _llvm_lock()
    if held is not None:
        held.acquire()


def _after_fork():
    held = _llvm_lock()
    if held is not None:
        held.release()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork)
