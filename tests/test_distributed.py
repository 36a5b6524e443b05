"""tracegrad.distributed on 2 ranks, each program a real run of the launcher (mpiexec, 2 processes):
collectives against NumPy, DistributedDataParallel against one process on the whole batch, and faults
that must stop every rank (there a hang is what is tested: those runs have a time limit). The sampler
needs no MPI."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hangs
from tracegrad.distributed.sampler import DistributedSampler

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "distributed_programs"
HAVE_MPI = importlib.util.find_spec("mpi4py") is not None
needs_mpi = pytest.mark.skipif(not HAVE_MPI and not os.environ.get("CI"),
                               reason="mpi4py is not installed (pip install -e '.[test]' installs it)")


def launch(program, *args, timeout=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRACEGRAD_THREADS="1")
    return subprocess.run([sys.executable, "-m", "tracegrad.distributed.run", "--nproc", "2", str(PROGRAMS / program),
                           *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@needs_mpi
@pytest.mark.parametrize("program", ["collectives.py", "ddp_parity.py"])
def test_two_ranks(program):
    p = launch(program)
    assert p.returncode == 0, p.stdout + p.stderr[-6000:]
    assert "rank 0: ok" in p.stdout and "rank 1: ok" in p.stdout


@needs_mpi
@pytest.mark.parametrize("fault", ["raise", "die", "hang"])
def test_a_failing_rank_stops_every_rank(fault):
    """Each run ends in 4-6 s (measured on a loaded machine): the limit only catches a run that hangs for good."""
    p = launch("faults.py", fault, timeout=hangs.limit(6.2))
    assert p.returncode != 0 and "rank 0 was not stopped" not in p.stdout
    assert "tracegrad.distributed.run: the run failed" in p.stderr
    if fault == "raise":     # the launcher names it, even where mpiexec dropped the rank's own output
        assert "the run failed (exit status 1): rank 1 raised ValueError: rank 1 fails on purpose" in p.stderr
    if fault == "hang":
        assert "DistributedTimeout: rank 0: all_reduce" in p.stderr and "did not complete within 3 s" in p.stderr


@pytest.mark.parametrize("n,world,drop_last", [(10, 3, False), (10, 3, True), (9, 3, False), (2, 4, False),
                                                (11, 4, True), (0, 2, False)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_sampler_partitions_as_pytorch(n, world, drop_last, shuffle):
    """Lengths as PyTorch's (ceil(n / world), or ceil((n - world) / world) dropping an uneven tail); the
    ranks' indices are disjoint positions of one padded order that covers every index (not dropping)."""
    samplers = [DistributedSampler(range(n), world, r, shuffle=shuffle, seed=3, drop_last=drop_last)
                for r in range(world)]
    per_rank = [list(s) for s in samplers]
    want = -(-(n - world) // world) if drop_last and n % world else -(-n // world)
    assert all(len(s) == want == len(idx) for s, idx in zip(samplers, per_rank))
    flat = [i for k in range(want) for idx in per_rank for i in idx[k:k + 1]]
    if not drop_last and n:
        assert set(flat) == set(range(n))
    assert len(set(flat)) == min(len(flat), n)
    if not shuffle and not drop_last and (n, world) == (10, 3):
        assert per_rank == [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]      # torch 2.13's, no shuffle


def test_sampler_epochs_reshuffle_the_same_on_every_rank():
    a = [DistributedSampler(range(20), 2, r, seed=1) for r in range(2)]
    first = [list(s) for s in a]
    for s in a:
        s.set_epoch(1)
    second = [list(s) for s in a]
    assert first != second and sorted(first[0] + first[1]) == sorted(second[0] + second[1]) == list(range(20))


def test_sampler_checks_its_rank():
    with pytest.raises(ValueError, match=r"Invalid rank 2, rank should be in the interval \[0, 1\]"):
        DistributedSampler(range(4), 2, 2)
