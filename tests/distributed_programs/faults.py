"""Run by tests/test_distributed.py on 2 ranks with one fault (argv[1]) on rank 1: 'raise' (an exception),
'die' (SIGKILL), 'hang' (rank 1 never joins the collective; the group's 3 s timeout ends rank 0)."""
import os
import signal
import sys
import time

import tracegrad as tg
import tracegrad.distributed as dist

fault = sys.argv[1]
# "hang": the group's 3 s timeout ends rank 0 (the hang tested); else the default, so that a busy machine
# never turns a raise or a death into a timeout
dist.init_process_group("mpi", **({"timeout": 3} if fault == "hang" else {}))
if dist.get_rank() == 1:
    if fault == "raise":
        raise ValueError("rank 1 fails on purpose")
    if fault == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "hang":
        time.sleep(600)
for _ in range(3):
    dist.all_reduce(tg.ones(3))
print("rank 0 was not stopped", flush=True)
