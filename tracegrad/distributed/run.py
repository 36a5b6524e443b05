"""The launcher, as torchrun: `python -m tracegrad.distributed.run --nproc N script.py [args...]` starts N
processes of the script under mpiexec (the one installed beside this Python by the `mpich` wheel, else
the one on PATH), each with RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE set as torchrun sets them, and
TRACEGRAD_THREADS, OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS = this machine's cores / the
processes on it (unless set): two ranks each running BLAS on every core made a step 10x slower. Each
rank runs this file as a plain script first (it imports nothing of tracegrad, so no BLAS has started
its threads before they are set), then the training script. Several hosts:
`--hosts a:2,b:2` (or `--hostfile F`), passed to mpiexec (MPICH's hydra: ssh to each host; every host
needs the same Python environment and the script at the same path).

A rank that raises prints its traceback and stops every rank; a rank that dies (killed, out of memory)
makes mpiexec stop the others; the launcher then exits with a non-zero status saying so."""
import argparse
import os
import runpy
import shutil
import subprocess
import sys
import tempfile

_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")
_LOCAL_RANK_VARS = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK")
_LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")


def mpiexec():
    """The mpiexec to start ranks with: beside this Python (a virtual environment with the mpich wheel),
    else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = beside if os.access(beside, os.X_OK) else shutil.which("mpiexec")
    if found is None:
        raise SystemExit("tracegrad.distributed.run: no mpiexec found: pip install mpi4py mpich "
                         "(or pip install -e '.[distributed]')")
    return found


def _first(names, default):
    for n in names:
        if n in os.environ:
            return os.environ[n]
    return default


def child(argv):
    """In each rank: the torchrun variables from MPI's, then the script as __main__."""
    rank, size = _first(_RANK_VARS, "0"), _first(_SIZE_VARS, "1")
    local_size = _first(_LOCAL_SIZE_VARS, size)
    os.environ.update(RANK=rank, WORLD_SIZE=size, LOCAL_RANK=_first(_LOCAL_RANK_VARS, rank),
                      LOCAL_WORLD_SIZE=local_size)
    threads = str(max(1, (os.cpu_count() or 1) // max(1, int(local_size))))
    for name in ("TRACEGRAD_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, threads)
    sys.argv = list(argv)
    if argv and argv[0] == "-m":
        sys.argv = argv[1:]
        sys.path[0] = os.getcwd()                   # as python -m: not this file's folder
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))     # as python script.py
        runpy.run_path(argv[0], run_name="__main__")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m tracegrad.distributed.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--nproc", "--nproc-per-node", "--nproc_per_node", type=int, default=1, dest="nproc",
                    help="processes in all (with --hosts: as the hosts' slots say)")
    ap.add_argument("--hosts", help="host:slots,... for several machines (mpiexec -hosts)")
    ap.add_argument("--hostfile", help="a file of host:slots lines (mpiexec -f)")
    ap.add_argument("--mpiexec-arg", action="append", default=[], help="one more argument for mpiexec")
    ap.add_argument("script", help="the training script (or -m module)")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    if a.nproc < 1:
        ap.error("--nproc must be at least 1")
    cmd = [mpiexec(), "-n", str(a.nproc)]
    if a.hosts:
        cmd += ["-hosts", a.hosts]
    if a.hostfile:
        cmd += ["-f", a.hostfile]
    cmd += a.mpiexec_arg + [sys.executable, os.path.abspath(__file__), "--child", a.script] + a.args
    with tempfile.TemporaryDirectory(prefix="tracegrad-ranks-") as errors:
        code = subprocess.call(cmd, env=dict(os.environ, TRACEGRAD_RANK_ERRORS=errors))
        if code != 0:
            raised = sorted(f for f in os.listdir(errors) if f.startswith("rank-"))
            said = [f"{f[5:-4]} raised {_last_line(os.path.join(errors, f))}" for f in raised]
            print(f"tracegrad.distributed.run: the run failed (exit status {code}): " +
                  ("; ".join(f"rank {s}" for s in said) + " (the traceback is above)" if said else
                   "a rank died or was stopped (killed, out of memory, or an MPI error); its message is above"),
                  file=sys.stderr)
    return code


def _last_line(path):
    with open(path) as fh:
        lines = [line for line in fh.read().splitlines() if line.strip()]
    return lines[-1] if lines else "an exception"


if __name__ == "__main__":
    sys.exit(main())
