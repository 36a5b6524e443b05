"""Under numba's CUDA simulator each GPU thread of a block is a Python thread, and the block's manager
polls them in a loop that holds the GIL: a thread reaching a barrier or its end waits for the GIL
to be handed over (every switch interval). A short interval makes that wait short (the suite takes
a quarter to a half less CPU time); what the tests check is unchanged. On a GPU nothing changes."""
import os
import sys

if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
    sys.setswitchinterval(2e-4)
