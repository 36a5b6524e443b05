"""Wall-clock limits in tests. A test stops something on time only where a hang is the failure it
tests (a forked child deadlocked on an inherited lock, a call waiting for workers that never run,
traces that must all be in flight at once, a watchdog); everything else waits as long as it takes,
so a busy machine makes the suite slower, never red. Such a limit is `limit(quiet)`: FACTOR times
the seconds the guarded work took when measured (written beside each call; measured on a loaded
2-core machine, so above the quiet time). tests/test_wall_clock.py finds any other limit."""
FACTOR = 10


def limit(quiet_seconds):
    """Seconds after which the guarded work counts as hung."""
    return FACTOR * quiet_seconds
