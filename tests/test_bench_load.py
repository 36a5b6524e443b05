"""bench/load.py on a simulated clock: a Load entered around several blocks counts only those blocks, and
settle() sleeps until this process's other threads stop using CPU (a BLAS pool's spin after its call)."""
import pytest

from tracegrad.bench import load as L


class Clock:
    """Wall time, this process's CPU time and the machine's busy time, advanced by hand; `spin_until`: a
    thread of this process burns one core until that wall time."""

    def __init__(self, cores=2):
        self.wall, self.cpu, self.busy, self.others_rate, self.spin_until = 0.0, 0.0, 0.0, 0.0, 0.0
        self.cores = cores

    def sleep(self, dt):
        spin = max(0.0, min(self.spin_until, self.wall + dt) - self.wall)
        self.wall += dt
        self.cpu += spin
        self.busy += spin + self.others_rate * dt * self.cores

    def work(self, dt):
        """The calling thread runs for dt (one core)."""
        self.sleep(dt)
        self.cpu += dt
        self.busy += dt


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(L.time, "perf_counter", lambda: c.wall)
    monkeypatch.setattr(L.time, "process_time", lambda: c.cpu)
    monkeypatch.setattr(L.time, "sleep", c.sleep)
    monkeypatch.setattr(L, "_busy_seconds", lambda: c.busy)
    monkeypatch.setattr(L, "_own_seconds", lambda: c.cpu)
    monkeypatch.setattr(L.os, "cpu_count", lambda: c.cores)
    return c


def test_a_load_counts_only_its_blocks(clock):
    load = L.Load()
    with load:
        clock.work(0.1)                    # others idle while timed
    clock.others_rate = 1.0                # others fill the machine between the blocks: not counted
    clock.sleep(5.0)
    clock.others_rate = 0.5
    with load:
        clock.work(0.1)                    # others use half the machine here
    assert load.others == pytest.approx(0.5 * 0.1 / 0.2)
    assert "not meaningful" in load.note()


def test_one_block_load(clock):
    clock.others_rate = 0.05
    with L.Load() as load:
        clock.work(1.0)
    assert load.others == pytest.approx(0.05) and load.note() == ""


def test_settle_waits_for_a_spinning_pool(clock):
    clock.spin_until = 0.1                 # OpenBLAS's workers spin ~0.1 s after a call
    L.settle()
    assert 0.1 <= clock.wall <= 0.1 + 3 * 0.01
    start = clock.wall                     # nothing spinning: two quiet windows
    L.settle()
    assert clock.wall - start == pytest.approx(0.02)


def test_settle_gives_up_on_a_pool_that_never_parks(clock):
    clock.spin_until = 1e9
    L.settle(limit=0.5)
    assert 0.5 <= clock.wall <= 0.52
