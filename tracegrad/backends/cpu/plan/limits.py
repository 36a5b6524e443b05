"""Every threshold of the CPU planner: constants measured on the bench machine (each with its
measurement where it is used), and the machine-dependent ones, calibrated on the machine at hand
(machine.py: measured once per CPU model and target, cached beside the kernel cache)."""
from .. import host, machine

# walk orders (order.py)
MIXED_TILE = 32      # the across tile where other heavy reads walk a reduced axis with unit stride (mixed)
ONLINE_LIMIT = 16384  # kept-axis elements times reductions of an online walk's vectors (online_columns)
ROWS_LIMIT = 8192    # elements of u times reductions a kernel reducing across u by rows keeps per chunk
TRANSPOSED = 4       # operands of a tiled map at most transposed in registers (a stack tile each)
REGS_CACHED = 1 << 20   # output bytes of a transposing map that transposes in registers at any row length
REGS_MIN = 256 << 10    # bytes a map moves below which it is tiled without register transposes
LINE = 64            # bytes of a cache line
TILED_ACC_BYTES = 2 << 20   # an accumulation whose reads disagree is tiled above this: below, it stays in L2

# the emitters' sizes (llvm.py, hoist.py, rowcache.py)
VERSIONED_EXTENT = 256  # a symbolic innermost extent up to this: a fast copy for its traced size (versioned.py)
SMALL_KERNEL = 1 << 14    # elements: a kernel this small is optimized for size (llvm.py's ModuleBuilder.kernel)
WIDE_LIMIT = 16384     # outputs of float32 leading-axis sums (all of a kernel's) kept in float64 stack arrays
OUTER_BLOCK = 16       # rows of the outermost axis a float32 sum adds in float32 before joining it
HOIST_ROWS = 8         # rows a kernel needs before its per-column values are computed apart (hoist.py)
MAX_KEPT = 8           # row buffers per kernel at most (rowcache.py; stack: 8 x 32 KiB of float32)
MAX_BOXES = 64         # boxes of a kernel over pieces run box by box at most (boxes.py: an inner loop's code each)
MIN_OPS = 2            # a value a later walk reads again, of fewer ops, is recomputed instead (rowcache.py)


def tiles():
    """(TILE, ACROSS_TILE): the tile of a transpose's two axes and the vector of partial results of a
    reduction across a kept axis (calibrated)."""
    return machine.value("tile"), machine.value("across_tile")


def stream_min_bytes():
    """The smallest output whose stores stream (stream.py's rule; calibrated)."""
    return machine.value("stream_min_bytes")


def scratch_limit():
    """Elements of a row a row kernel keeps in stack buffers at most (rowcache.py, online.py; calibrated)."""
    return machine.value("scratch_limit")


def block_bytes():
    """Bytes of a block of rows an online column walk reads twice while in cache (online_columns.py; calibrated)."""
    return machine.value("block_bytes")


def online_block():
    """Elements of a row an online row walk takes per block (online.py; calibrated)."""
    return machine.value("online_block")


def hoist_bytes():
    """Stack bytes a kernel's per-column values computed once per call may take (hoist.py; calibrated)."""
    return machine.value("hoist_bytes")


def parallel_min_work():
    """Element-ops a kernel (or a group of small ones) needs before threads split it (regions.py; calibrated)."""
    return machine.value("parallel_min_work")


def gathers():
    """Whether a map kernel's code may use vector gathers and scatters (LLVM's choice). Not where they
    are slow (host.slow_gathers): on a 2-core EPYC (znver4), W10's maps that read strided or gathered
    elements (a max pool's picks and window-major copy, paddings) ran 2-4x slower in the native AVX-512
    build than in the x86-64-v3 one, and as fast without gathers; a reduction across a kept axis
    ((x.T * z).sum(1)) ran 5-20 % faster with them, so the choice is the maps' only."""
    return not host.slow_gathers()
