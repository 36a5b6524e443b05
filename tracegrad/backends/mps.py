"""`tg.backends.mps`: Apple's Metal backend, which tracegrad does not have (so the usual device line
`"cuda" if tg.cuda.is_available() else "mps" if tg.backends.mps.is_available() else "cpu"` runs)."""


def is_available():
    """False: tracegrad has no Metal (MPS) backend."""
    return False


def is_built():
    """False: tracegrad is not built with Metal (MPS) support."""
    return False
