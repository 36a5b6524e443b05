"""How busy the machine was while something was timed: the share of all cores that other processes used
(Linux: /proc/stat's busy time less this process's CPU time). A timing taken while others used more than
BUSY of the machine says as much about them as about the code: the bench and the examples say so beside
their figures."""
import os
import time

BUSY = 0.10


def _busy_seconds():
    """CPU seconds all cores have spent busy since boot, or None where /proc/stat is missing."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(v) for v in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)          # idle + iowait
    busy = sum(fields[:8]) - idle                                      # without guest time (counted in user)
    return busy / os.sysconf("SC_CLK_TCK")


def _own_seconds():
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class Load:
    """`with Load() as load: ...`, then `load.others`: the share of all cores other processes used during the
    block (None where unknown), and `load.note()`: a warning text when it passed BUSY, else ""."""

    def __enter__(self):
        self.others = None
        self._start = (time.perf_counter(), _busy_seconds(), _own_seconds())
        return self

    def __exit__(self, *exc):
        wall, busy, own = self._start
        now_busy = _busy_seconds()
        wall = time.perf_counter() - wall
        if busy is not None and now_busy is not None and wall > 0:
            others = (now_busy - busy) - (_own_seconds() - own)
            self.others = max(0.0, others / (wall * (os.cpu_count() or 1)))
        return False

    def note(self):
        if self.others is None or self.others <= BUSY:
            return ""
        return (f"other processes used {self.others:.0%} of the machine while this was timed (more than "
                f"{BUSY:.0%}): the times are not meaningful; measure on a quiet machine")
