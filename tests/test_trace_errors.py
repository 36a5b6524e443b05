"""What a user hears when a compiled function does something only eager code can: traced values kept
outside the function, reading values inside it, drawing Python/NumPy random numbers while traced."""
import inspect
import random
import threading
import warnings

import numpy as np
import numpy.random as npr
import pytest

import tracegrad as tg
from tracegrad import nn


def _line_of(fn, marker):
    src, first = inspect.getsourcelines(fn)
    return first + next(i for i, s in enumerate(src) if marker in s)


# ---------------------------------------------------------------- escaped traced values

def _leaky():
    kept = {}

    def f(x):
        y = (x * 2.0).exp()         # MADE
        kept["y"] = y
        kept.setdefault("all", []).append(y)
        return y.sum()

    return f, kept


@pytest.mark.parametrize("use", ["add", "radd", "method", "item", "numpy", "float", "in_place", "compiled"])
def test_a_traced_value_kept_outside_names_where_it_was_made(use):
    f, kept = _leaky()
    tg.compile(f, backend="interpret")(tg.ones(3))
    y = kept["all"][0]
    uses = {"add": lambda: y + 1.0, "radd": lambda: tg.ones(3) + y, "method": lambda: y.sum(),
            "item": lambda: y[0].item(), "numpy": lambda: y.numpy(), "float": lambda: float(y.sum()),
            "in_place": lambda: y.add_(1.0),
            "compiled": lambda: tg.compile(lambda x: x * y, backend="interpret")(tg.ones(3))}
    with pytest.raises(tg.TraceError) as ei:
        uses[use]()
    msg = str(ei.value)
    assert f"{__file__}:{_line_of(f, 'MADE')}" in msg, msg
    assert "side effects" in msg and "only while it is traced" in msg and "Return the tensor" in msg
    assert "float32[3]" in msg


def test_a_kept_argument_stand_in_is_an_escaped_value_too():
    kept = []

    def f(x):
        kept.append(x)
        return x * 2.0

    tg.compile(f, backend="interpret")(tg.ones(2))
    with pytest.raises(tg.TraceError, match="an input of the trace while f was being compiled"):
        kept[0] * 3.0


def test_escaped_value_used_in_another_thread():
    f, kept = _leaky()
    tg.compile(f, backend="interpret")(tg.ones(3))
    errors = []

    def use():
        try:
            kept["y"] + 1.0
        except tg.TraceError as e:
            errors.append(str(e))

    t = threading.Thread(target=use)
    t.start()
    t.join()
    assert len(errors) == 1 and "after its trace ended" in errors[0]


# ---------------------------------------------------------------- reading values inside a trace

def _item(x):
    return x * x.sum().item()                   # READ


def _float(x):
    return x * float(x.sum())                   # READ


def _int(x):
    return x * int(x.sum())                     # READ


def _numpy(x):
    return x * x.sum().numpy()                  # READ


def _tolist(x):
    return x * len(x.tolist())                  # READ


@pytest.mark.parametrize("f", [_item, _float, _int, _numpy, _tolist])
def test_reading_a_value_inside_compile_says_return_it_or_compute_outside(f):
    with pytest.raises(tg.TraceError) as ei:
        tg.compile(f, backend="interpret")(tg.ones(3))
    msg = str(ei.value)
    assert f"{__file__}:{_line_of(f, 'READ')}" in msg
    assert "Return the tensor from the compiled function" in msg and "outside the compiled function" in msg
    assert "after its trace ended" not in msg


def test_branching_on_a_value_inside_compile_suggests_where():
    def f(x):
        if x.sum() > 0:          # BRANCH
            return x
        return -x

    with pytest.raises(tg.TraceError) as ei:
        tg.compile(f, backend="interpret")(tg.ones(3))
    msg = str(ei.value)
    assert f"{__file__}:{_line_of(f, 'BRANCH')}" in msg and "tg.where" in msg and "control flow" in msg


# ---------------------------------------------------------------- random draws frozen by tracing

class _DynamicNet(nn.Module):
    """PyTorch's dynamic-graph example: a random number of middle layers on each forward."""

    def __init__(self):
        super().__init__()
        self.inp, self.mid, self.out = nn.Linear(3, 4), nn.Linear(4, 4), nn.Linear(4, 1)

    def forward(self, x):
        h = self.inp(x).relu()
        for _ in range(random.randint(0, 3)):          # DRAW
            h = self.mid(h).relu()
        return self.out(h)


def _frozen_warnings(record):
    return [w for w in record if issubclass(w.category, RuntimeWarning) and "frozen" in str(w.message)]


def test_python_random_while_tracing_warns_naming_the_line():
    net = _DynamicNet()
    step = tg.compile(lambda x: net(x).sum(), backend="interpret")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        step(tg.ones(2, 3))
    (w,) = _frozen_warnings(record)
    line = _line_of(_DynamicNet.forward, "DRAW")
    assert (w.filename, w.lineno) == (__file__, line)
    msg = str(w.message)
    assert f"{__file__}:{line}" in msg and "Python's random module" in msg and "every call repeats" in msg


def _np_draw(x):
    return x * float(np.random.rand())          # DRAW


def _alias_draw(x):
    return x * float(npr.uniform())             # DRAW


def _imported_draw(x):
    return x * float(npr_choice([0.5, 2.0]))    # DRAW


@pytest.mark.parametrize("f", [_np_draw, _alias_draw, _imported_draw])
def test_numpy_global_generator_while_tracing_warns_naming_the_line(f):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        tg.compile(f, backend="interpret")(tg.ones(2))
    (w,) = _frozen_warnings(record)
    assert (w.filename, w.lineno) == (__file__, _line_of(f, "DRAW"))
    assert "NumPy's global random generator" in str(w.message)


npr_choice = npr.choice


def test_tracegrad_random_and_seeded_values_outside_do_not_warn():
    r = random.random()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        f = tg.compile(lambda x: x * tg.rand(2) + r + float(np.float64(1.0)), backend="interpret")
        f(tg.ones(2))
        tg.compile(lambda x: nn.functional.dropout(x, 0.5), backend="interpret")(tg.ones(4))
    assert not _frozen_warnings(record)


def test_draws_of_another_thread_do_not_warn_the_tracing_thread():
    stop = threading.Event()

    def draw():
        while not stop.is_set():
            random.random()
            np.random.rand()

    t = threading.Thread(target=draw)
    t.start()
    try:
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            for k in range(5):
                tg.compile(lambda x: (x * 2.0).sum(), backend="interpret")(tg.ones(k + 1))
    finally:
        stop.set()
        t.join()
    assert not _frozen_warnings(record)
