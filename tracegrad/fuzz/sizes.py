"""The size-sequence mode (`python -m tracegrad fuzz --sizes`): every generated program is also run across a
sequence of input sizes, compiled ONCE (with dynamic=True, and with the default dynamic=None) and called at
each size in turn, against eager run over the same sequence.

Each size of the program's inputs above 1 is a dimension that varies: along the sequence it takes its own
size first, then (shuffled) another size above 1, 1, 0, a third size above 1 and the second again (a cache
hit). Sizes 0 and 1 of the generated shapes stay (they are the broadcasting partners). A train program varies
only its batch. Code that bakes a size in (`reshape(51)`, `t[2]`) stays as written: at a size where eager
raises, the compiled call must raise the same error; where eager runs, the same values.

What is checked, per mode:
- values, gradients, shapes and errors at every size, as the default fuzz checks them (a wrong cache hit, a
  call that reused an entry it should not have, shows here: a stale shape or value);
- traces (`traces:` problems): every trace after a compiled function's first must come with a retrace
  reason ("unexplained"), and in dynamic=True mode a call in the 0 / 1 / >1 class of an earlier call that ran
  must not retrace for sizes alone ("same-class": a reason that names no failed guard and no state change).
  Retraces a guard or a state change explains are counted in the summary (`sizes_traces`), not failures.
- symbolic compiles that failed (`traces:symbolic-failure`): the jit fell back to compiling per size (right
  values, a retrace per size): each is a limit of the symbolic pipeline to fix.
"""
import re

import numpy as np

from .compare import Observation, compare_runs
from .source import Program

CALLS = 6
FIXED_CALLS = 2     # a program with no size that varies: its first call and one more (a cache hit or a state guard)
DYNAMIC = "/dynamic"          # a mode suffix: "llvm/dynamic" is tg.compile(..., backend="llvm", dynamic=True)


def plan(program, calls=CALLS):
    """[{size: size at this call}] for the program's varying sizes (the first call: the sizes as generated).
    Without one, FIXED_CALLS calls: more would repeat the same shapes, checking nothing about sizes."""
    r = np.random.default_rng([program.seed, 26])
    sizes = _varying(program)
    if not sizes:
        return [{} for _ in range(FIXED_CALLS)]
    columns = {}
    for v in sizes:
        others = [int(s) for s in r.choice([s for s in range(2, 2 * v + 6) if s != v], 2, replace=False)]
        rest = [others[0], 1, others[1], 0, others[0]][:calls - 1]
        columns[v] = [v] + [int(s) for s in r.permutation(rest)]
    return [{v: columns[v][k] for v in sizes} for k in range(calls)]


def _varying(program):
    """The sizes that vary: every input size above 1, or a train program's batch (unless another of
    its sizes is the same number)."""
    shapes = [shape for _, shape, _ in program.inputs]
    if program.kind == "train":
        n = shapes[0][0]
        fixed = set(shapes[0][1:]) | {s for shape in shapes[1:] for s in shape[1:]}
        return [n] if n > 1 and n not in fixed else []
    return sorted({s for shape in shapes for s in shape if s > 1})


def size_class(sizes):
    """The 0 / 1 / >1 class of each varying size: calls of one class take the same broadcasting paths."""
    return tuple((v, min(n, 2)) for v, n in sorted(sizes.items()))


class SizedProgram(Program):
    """A generated program run across `plan`: the inputs made at each call's sizes, the function
    compiled once (harness.compiled), every observation labelled `size<k>.`."""

    def __init__(self, program, sizes_plan=None):
        self.__dict__.update(program.__dict__)
        self.base, self.plan = program, sizes_plan or plan(program)
        self.notes = [f"sizes {_describe(p)}" for p in self.plan]

    def replace(self, body=None, returns=None, calls=None):
        return SizedProgram(self.base.replace(body, returns, calls), self.plan)

    def source(self):
        src = re.sub(r"\bdata\((rng|np\.random\.default_rng\(\d+\)), (\([\d, ]*\))", r"data(\1, resize(\2)",
                     self.base.source())
        src = re.sub(r"\blabels\(rng, (\d+),", r"labels(rng, resize(\1),", src)
        src = src.replace("from tracegrad.fuzz.harness import", "from tracegrad.fuzz.harness import compiled, resize, "
                          "start_sizes, symbolic_failures, use_sizes,").replace('"""tracegrad fuzz:', '"""tracegrad fuzz --sizes:', 1)
        start = src.index("def run(mode, dtype=DTYPE):")
        end = src.index("    return rec\n", start)
        lines = src[start:end].splitlines()
        before, inside = _split(lines[3:])                # after the def, manual_seed and the Recorder
        loop = [f"    for k, sizes in enumerate({self.plan!r}):", "        use_sizes(sizes)",
                "        rec.prefix = f'size{k}.'", "        try:", *("        " + line for line in inside),
                "        except Exception as e:  # noqa: BLE001 -- recorded; the next size is called",
                "            rec.raised(e)"]
        run = lines[:3] + ["    start_sizes()"] + [line.replace("tg.compile(", "compiled(") for line in before + loop] + \
            ["    rec.symbolic_failures = symbolic_failures()", "    rec.traces = use_sizes(None)", ""]
        return src[:start] + "\n".join(run) + src[end:].replace("main(run)", "main(run, sizes=True)")


def _split(body):
    """The run's statements in two: what runs once before the size loop (the model and optimizer made before
    the inputs, helper definitions, the compiled functions) and what runs at every size (the inputs, what
    reads them, the calls)."""
    groups = []
    for line in body:
        if groups and (line.startswith("     ") or not line.strip()):
            groups[-1].append(line)        # a block's indented lines and blank lines stay with its first line
        else:
            groups.append([line])
    before, inside, seen_inputs = [], [], False
    for g in groups:
        seen_inputs = seen_inputs or g[0].strip().startswith("xs = inputs(")
        once = g[0].strip().startswith("def ") or "tg.compile(" in g[0] or not seen_inputs
        (before if once else inside).extend(g)
    return before, inside


def _describe(sizes):
    return ", ".join(f"{v}->{n}" for v, n in sorted(sizes.items())) or "as generated"


def modes(backends):
    """The compiled modes of a --sizes run: each backend with dynamic=True and with the default."""
    return [m for b in backends for m in (b + DYNAMIC, b)]


def compare_sized(eager, other, ref, dtype):
    """compare_runs size by size: at a size where one run raised (its `raised` observation), the other must
    raise the same error (else `accepted` or `error:<Type>` at that size); the next sizes are compared too."""
    if eager.error is not None or other.error is not None:
        return compare_runs(eager, other, ref, dtype)
    problems = []
    by_size = [_by_size(obs) for obs in (eager, other, ref)]
    for k in sorted(set(by_size[0]) | set(by_size[1])):
        found = compare_runs(*(_at(obs, items.get(k, []), k) for obs, items in zip((eager, other, ref), by_size)),
                             dtype)
        problems += [(cat, text if text.startswith("size") else f"size{k}.: {text}") for cat, text in found]
    return problems


def _size_of(label):
    return int(re.match(r"size(\d+)\.", label).group(1))


def _by_size(obs):
    """{size k: the observation's items at size k}."""
    out = {}
    for item in obs.items:
        out.setdefault(_size_of(item[0]), []).append(item)
    return out


def _at(obs, items, k):
    """The observation of size k alone (`items`: its items there), or the error it raised there."""
    if obs.error is not None:
        return obs
    if items and items[-1][0].endswith(".raised"):
        name, text = items[-1][1]
        return Observation(error=(name, f"at size{k}: {text}"), kinds=[name])
    return Observation(items)


def trace_problems(program, obs, mode):
    """`traces:` problems of one compiled observation (see the module's text); obs.traces is
    harness.use_sizes(None)'s record: per compiled function, per size, (traces made, retrace reasons added)."""
    if obs.error is not None or not getattr(obs, "traces", None):
        return []
    problems = [("traces:symbolic-failure", f"{name}: {why}") for name, whys in getattr(obs, "symbolic_failures", [])
                for why in dict.fromkeys(whys)]
    raised = {_size_of(label) for label, _ in obs.items if label.endswith(".raised")}
    for name, calls in obs.traces:
        seen = set()            # the size classes of the calls so far that ran (traced or not) without raising
        for k, (traced, reasons) in enumerate(calls):
            where = f"size{k}. {name} ({_describe(program.plan[k])})"
            cls = size_class(program.plan[k])
            if traced and k and not reasons:
                problems.append(("traces:unexplained", f"{where} traced again with no retrace reason"))
            elif traced and mode.endswith(DYNAMIC) and cls in seen and reasons and all(map(_shape_only, reasons)):
                problems.append(("traces:same-class", f"{where} retraced in the 0/1/>1 class of an earlier call, "
                                                      f"for sizes alone: {reasons}"))
            if k not in raised:
                seen.add(cls)
    return problems


def _shape_only(reason):
    """A retrace reason that names only sizes (e.g. "x: shape (3, 5) -> (3, 7)", "x: dim 0 became symbolic B
    (5 -> 7)"), no failed guard and no state change: dynamic=True should have made those sizes symbolic."""
    return bool(re.search(r"shape \(.*\) -> \(|became symbolic", reason)) and "guard" not in reason
