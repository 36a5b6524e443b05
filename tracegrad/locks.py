"""Locks and per-process state that a forked child finds sane.

`os.fork()` copies only the thread that calls it: a lock another thread held at that moment (a
compiled call in flight, a first compile) would stay held in the child forever, and the child's
first use would wait on it for good; a count of what other threads were doing (the compiles that
paused the garbage collector) would never come back to zero. So every lock of tracegrad comes from
`lock()` or `rlock()` (tests/test_fork_safety.py checks the source for others), and state counted
per thread registers a reset with `after_fork_in_child`. In the child, a plain lock that was held
is released and a reentrant one not held by the forking thread is made new. Each guards state that
the next holder rebuilds or re-checks before use, so a released lock leaves nothing half-done
behind. Never fork while holding a plain one of these locks."""
import os
import threading
import weakref

_LOCKS = weakref.WeakSet()
_RLOCKS = weakref.WeakSet()
_RESETS = []


def lock():
    """A threading.Lock released in a forked child."""
    new = threading.Lock()
    _LOCKS.add(new)
    return new


def rlock():
    """A threading.RLock that a forked child finds free unless the forking thread held it."""
    new = threading.RLock()
    _RLOCKS.add(new)
    return new


def after_fork_in_child(reset):
    """Run `reset()` in every forked child, after the locks are freed (registration order)."""
    _RESETS.append(reset)
    return reset


def _free_in_child():
    for held in list(_LOCKS):
        if held.locked():
            held.release()
    for held in list(_RLOCKS):
        if not held._is_owned():       # free, or owned by a thread the child does not have
            held._at_fork_reinit()
    for reset in _RESETS:
        reset()


os.register_at_fork(after_in_child=_free_in_child)
