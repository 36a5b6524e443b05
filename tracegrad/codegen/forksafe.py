"""Locks that a forked child finds free.

`os.fork()` copies only the thread that calls it: a lock that another thread held at that moment
(a compiled call in flight, a first compile) would stay held in the child forever, and the child's
first call would wait on it for good. Every lock of the compiled-code runtime comes from `lock()`;
after a fork the child releases those that were held. Each guards state that the next holder
rebuilds before use (a program's pointer table and scratch buffers are rewritten by every call), so
a released lock leaves nothing half-done behind. Never fork while holding one of these locks.

llvmlite runs every LLVM call under one process-wide lock; the parent takes it just before forking
(waiting for an LLVM call in another thread to finish), so the child never inherits LLVM halfway
through a compile, and both sides release it after the fork."""
import os
import threading
import weakref

from llvmlite.binding import ffi

_LOCKS = weakref.WeakSet()


def lock():
    """A threading.Lock released in a forked child."""
    new = threading.Lock()
    _LOCKS.add(new)
    return new


def _llvm_lock():
    return getattr(getattr(ffi.lib, "_lock", None), "_lock", None)   # llvmlite's RLock, if it has one


def _before_fork():
    held = _llvm_lock()
    if held is not None:
        held.acquire()


def _after_fork_in_parent():
    held = _llvm_lock()
    if held is not None:
        held.release()


def _after_fork_in_child():
    _after_fork_in_parent()
    for held in list(_LOCKS):
        if held.locked():
            held.release()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                    after_in_child=_after_fork_in_child)
