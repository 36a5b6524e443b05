"""Run generated programs eagerly and under each backend, compare, shrink what fails, summarize."""
import collections
import contextlib
import linecache
import os
import pickle
import re
import signal
import time
import warnings

from .compare import Observation, compare_runs
from .programs import KINDS, generate
from .sizes import CALLS, FIXED_CALLS, SizedProgram, compare_sized, modes, trace_problems

BACKENDS = ("interpret", "llvm")
SHRINK_PER_CLASS = 2
WARM_UP_KINDS = ("graph", "train", "penalty")   # failing programs shrunk per class (kind, backend, category); later ones are written as is


def observe(run, mode, dtype, device=None):
    """Run a program in `mode` (eager or a backend) with `device` as the default device (the cuda
    backend: cuda), so that its inputs, models and the tensors it makes live there. Calls may join
    their gradient whatever their size (jit/joined.py; by default only from 1 MiB), so the fuzzer's
    small programs exercise that path too."""
    cuda = mode.split("/")[0] == "cuda"
    with warnings.catch_warnings(), on_device("cuda" if cuda else device), joins_at_any_size():
        warnings.simplefilter("ignore")
        try:
            rec = run(mode, dtype)
            obs = Observation(rec.items, traces=getattr(rec, "traces", None))
            obs.symbolic_failures = getattr(rec, "symbolic_failures", [])
            return obs
        except Exception as e:  # noqa: BLE001 -- any error is an observation to compare
            return Observation(error=(type(e).__name__, (str(e).splitlines() or [""])[0][:300]),
                               kinds=[c.__name__ for c in type(e).__mro__])


@contextlib.contextmanager
def joins_at_any_size():
    from ..jit import joined
    before, joined.JOIN_MIN_BYTES = joined.JOIN_MIN_BYTES, 0
    try:
        yield
    finally:
        joined.JOIN_MIN_BYTES = before


@contextlib.contextmanager
def on_device(dev):
    """tg.set_default_device(dev) for the block (dev None: leave it)."""
    if dev is None:
        yield
        return
    import tracegrad as tg
    before = tg.get_default_device()
    tg.set_default_device(dev)
    try:
        yield
    finally:
        tg.set_default_device(before)


def load(program):
    """The program's `run` function, from its source (registered with linecache for tracebacks)."""
    src = program.source()
    name = f"<tracegrad-fuzz {program.seed}:{program.index}>"
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    ns = {"__name__": "tracegrad_fuzz_program", "__file__": name}
    exec(compile(src, name, "exec"), ns)
    return ns["run"]


def check(program, backends=BACKENDS, tally=None):
    """(eager error or None, [(backend, category, text)]) for one program. The cuda backend is
    compared with eager on cuda (random draws on cuda differ from the cpu's, as in PyTorch; that
    eager cuda computes what eager cpu does is what tests/cuda check); where eager cuda fails on a
    program the cpu runs and the backend does not fail the same way, with eager on the cpu. A SizedProgram
    (--sizes) is also checked for its traces (sizes.trace_problems), counted per mode into `tally`."""
    run = load(program)
    eager, ref = _eager(run, program.dtype)
    problems = []
    compare = compare_sized if isinstance(program, SizedProgram) else compare_runs
    for b in backends:
        got = observe(run, b, program.dtype)
        if b.split("/")[0] != "cuda":
            found = compare(eager, got, ref, program.dtype)
        else:
            e, r = _eager(run, program.dtype, "cuda")
            found = compare(e, got, r, program.dtype)
            if found and e.error is not None and eager.error is None:
                found = compare(eager, got, ref, program.dtype)
        if isinstance(program, SizedProgram):
            found += trace_problems(program, got, b)
            if tally is not None and got.traces:
                tally[b] = tally.get(b, 0) + sum(t for _, calls in got.traces for t, _ in calls)
        problems += [(b, cat, text) for cat, text in found]
    return eager.error, problems


def check_forked(program, backends, tally):
    """check() in a forked child (--sizes): a program whose compiled code kills the process (a segfault)
    is a `crash:<signal>` problem, and the run goes on."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                               # the child: check, send the result, exit without cleanup
        os.close(r)
        child_tally = {}
        try:
            result = pickle.dumps((check(program, backends, child_tally), child_tally))
        except BaseException as e:  # noqa: BLE001 -- re-raised in the parent as the fuzzer's own error
            result = pickle.dumps(RuntimeError(f"{type(e).__name__}: {e}"))
        try:
            with os.fdopen(w, "wb") as fh:
                fh.write(result)
        finally:        # also where the parent is gone (a broken pipe): never go on as a second fuzzer
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        data = fh.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return None, [("any", f"crash:{name}", f"the process died ({name}) running the program in one of "
                                               f"{', '.join(backends)}: run its repro file to see which")]
    got = pickle.loads(data)
    if isinstance(got, Exception):
        raise got
    (eager_error, problems), child_tally = got
    for k, v in child_tally.items():
        tally[k] = tally.get(k, 0) + v
    return eager_error, problems


def warm_up(modes_run):
    """Check a few fixed programs here, in the parent, so that what every program's forked child would
    otherwise load and build again (LLVM's target, the runtime's native helpers, NumPy and numba
    dispatch, lazy imports) is there before the fork; their results are not counted."""
    for kind in WARM_UP_KINDS:
        check(SizedProgram(generate(0, 0, kind=kind)), modes_run)


def _eager(run, dtype, *device):
    """The eager observation of a program, and its float64 reference (on `device`: default cpu)."""
    eager = observe(run, "eager", dtype, *device)
    return eager, (observe(run, "eager", "float64", *device) if dtype == "float32" else eager)


def shrink(program, backend, cat, budget=40):
    """Remove statements, calls and returned values while `backend` still shows a problem of class
    `cat` and eager still succeeds (or fails) as it did."""
    eager_error = check(program, ())[0]

    def fails(p):
        nonlocal budget
        budget -= 1
        err, probs = check(p, (backend,))
        return (err and err[0]) == (eager_error and eager_error[0]) and any(c == cat for _, c, _ in probs)

    changed = True
    while changed and budget > 0:
        changed = False
        for field in ("body", "calls", "returns"):
            items = getattr(program, field)
            for i in reversed(range(len(items))):
                if budget <= 0 or field != "body" and len(items) == 1:
                    break
                cand = program.replace(**{field: items[:i] + items[i + 1:]})
                if fails(cand):
                    program, changed, items = cand, True, getattr(cand, field)
    return program


def write_repro(program, problems, out):
    """Write the program as a runnable file named after its first problem; return its path."""
    backend, cat, _ = problems[0]
    slug = cat.replace(":", "-").replace(".", "_")
    path = os.path.join(out, f"{program.kind}-{backend.replace('/', '-')}-{slug}-s{program.seed}-n{program.index}.py")
    head = "".join(f"# {b}: {c}: {t}\n" for b, c, t in problems[:8])
    with open(path, "w") as fh:
        fh.write(head + program.source())
    return path


def trigger(program, label):
    """What preceded the call whose observation `label` differs: the aliasing pattern of that call
    (alias), the latest state change (train), which call (mutate); "" for single-call programs."""
    if isinstance(program, SizedProgram):
        m = re.match(r"size(\d+)\.", label)
        inner = trigger(program.base, label[m.end():]) if m else ""
        return (program.notes[int(m.group(1))] + (f", {inner}" if inner else "")) if m else ""
    m = re.match(r"call(\d+)\.", label)
    if not m or not program.notes:
        return ""
    k = int(m.group(1))
    if program.kind != "train":
        return program.notes[min(k, len(program.notes) - 1)]
    form = program.notes[0]                     # train notes: "<change> (<form>)", or "(<form>)"
    changes = [program.notes[j] for j in range(min(k, len(program.notes) - 1), 0, -1)
               if not program.notes[j].startswith("(")]
    return f"after {changes[0]}" if changes else \
        ("first call " if k == 0 else "repeated call, no state change ") + form


def classify(program, problems):
    """The program's class: (kind, what, trigger) of its first problem, and the backends showing it."""
    b, cat, text = problems[0]
    key = (program.kind, cat, trigger(program, text.split(":")[0]))
    return key, sorted({b2 for b2, c2, t2 in problems if c2 == cat})


def fuzz(n, seed, backends=BACKENDS, out="fuzz-failures", start=0, kinds=None, dtype=None, do_shrink=True,
         log=print, sizes=False):
    """Generate and check programs start..start+n-1 of stream `seed`; write failing ones into `out`;
    return the summary (a dict) and print it. `sizes`: run each across a sequence of sizes, compiled
    once with dynamic=True and with the default (sizes.py)."""
    from ..jit.function import ALL_BACKENDS as known
    for b in backends:
        if b not in known:
            raise ValueError(f"unknown backend {b!r}; expected one of {', '.join(known)}")
        if b == "cuda":
            from .. import cuda
            if not cuda.is_available():
                raise ValueError("backend cuda needs a GPU (numba-cuda: pip install -e '.[gpu]') or numba's CUDA "
                                 "simulator: NUMBA_ENABLE_CUDASIM=1 python -m tracegrad fuzz --backend cuda")
    for k in kinds or ():
        if k not in KINDS:
            raise ValueError(f"unknown program kind {k!r}; expected one of {', '.join(KINDS)}")
    os.makedirs(out, exist_ok=True)
    modes_run = modes(backends) if sizes else list(backends)
    t0 = time.time()
    if sizes:
        warm_up(modes_run)
    tally, sized_calls = {}, 0
    by_kind, eager_refused, internal, classes = collections.Counter(), collections.Counter(), collections.Counter(), {}
    for i in range(start, start + n):
        if (i - start) % 500 == 0 and i > start:
            log(f"  ... {i - start} programs, {time.time() - t0:.0f} s")
        try:
            program = generate(i, seed, dtype=dtype, kind=kinds[i % len(kinds)] if kinds else None)
            program = SizedProgram(program) if sizes else program
            by_kind[program.kind] += 1
            sized_calls += len(program.plan) if sizes else 0
            eager_error, problems = (check_forked if sizes else check)(program, modes_run, tally)
        except Exception as e:  # noqa: BLE001 -- a fuzzer bug must not end the run: count it, go on
            internal[type(e).__name__] += 1
            log(f"  program {i}: the fuzzer itself failed: {type(e).__name__}: {e}")
            continue
        if eager_error:
            eager_refused[f"{program.kind} {eager_error[0]}"] += 1
        if not problems:
            continue
        key, shown_by = classify(program, problems)
        entry = classes.setdefault(key, {"programs": 0, "backends": set(), "example": None})
        entry["programs"] += 1
        entry["backends"].update(shown_by)
        small = program
        if do_shrink and entry["programs"] <= SHRINK_PER_CLASS and not problems[0][1].startswith("crash:"):
            small = shrink(program, problems[0][0], problems[0][1])
        _, small_problems = (check_forked if sizes else check)(small, modes_run, {}) if small is not program \
            else (None, problems)
        path = write_repro(small, small_problems or problems, out)
        entry["example"] = entry["example"] or path
        log(f"  program {i} ({program.kind}, {program.dtype}): {' | '.join(key)} [{', '.join(shown_by)}] -> {path}")
    summary = dict(seed=seed, start=start, programs=n, seconds=round(time.time() - t0, 1), backends=modes_run,
                   by_kind=dict(by_kind), eager_refused=dict(eager_refused), fuzzer_errors=dict(internal),
                   classes={" | ".join(k): dict(v, backends=sorted(v["backends"])) for k, v in classes.items()})
    if sizes:
        summary["sizes_traces"], summary["sized_calls"] = tally, sized_calls
    for name, test in GROUPS:
        summary[f"{name}_programs"] = sum(v["programs"] for k, v in classes.items() if test(k[1]))
    log(format_summary(summary))
    return summary


def merge(summaries):
    """One summary for several chunks (e.g. the --json files of runs over different seeds)."""
    out = dict(seed=",".join(str(s["seed"]) for s in summaries), start=",".join(str(s["start"]) for s in summaries),
               programs=sum(s["programs"] for s in summaries), seconds=round(sum(s["seconds"] for s in summaries), 1),
               backends=sorted({b for s in summaries for b in s["backends"]}), by_kind=collections.Counter(),
               eager_refused=collections.Counter(), fuzzer_errors=collections.Counter(), classes={})
    for s in summaries:
        out["by_kind"].update(s["by_kind"])
        out["fuzzer_errors"].update(s.get("fuzzer_errors", {}))
        out["eager_refused"].update(s["eager_refused"])
        for k, v in s["classes"].items():
            e = out["classes"].setdefault(k, {"programs": 0, "backends": [], "example": v["example"]})
            e["programs"] += v["programs"]
            e["backends"] = sorted(set(e["backends"]) | set(v["backends"]))
    for name, _ in GROUPS:
        out[f"{name}_programs"] = sum(s.get(f"{name}_programs", 0) for s in summaries)
    if any("sizes_traces" in s for s in summaries):
        out["sized_calls"] = sum(s.get("sized_calls", s["programs"] * CALLS) for s in summaries)
        out["sizes_traces"] = dict(sum((collections.Counter(s.get("sizes_traces", {})) for s in summaries),
                                       collections.Counter()))
    for k in ("by_kind", "eager_refused", "fuzzer_errors"):
        out[k] = dict(out[k])
    return out


def _is_mismatch(cat):
    return not cat.startswith(("error:", "traces:")) and cat != "accepted"


GROUPS = (("mismatch", _is_mismatch), ("error", lambda c: c.startswith("error:")),
          ("accepted", lambda c: c == "accepted"), ("traces", lambda c: c.startswith("traces:")))


def format_summary(s):
    lines = [f"tracegrad fuzz: {s['programs']} programs (seed {s['seed']}, from {s['start']}; "
             f"eager vs {', '.join(s['backends'])}) in {s['seconds']} s",
             "  by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(s["by_kind"].items())),
             f"  programs with a mismatch (silent wrong result): {s['mismatch_programs']}; "
             f"with an error (a backend raised, eager did not): {s['error_programs']}; "
             f"accepted (eager raised, a backend did not): {s['accepted_programs']}"]
    if "sizes_traces" in s:
        calls = s.get("sized_calls", s["programs"] * CALLS)
        lines.append(f"  across sizes ({CALLS} sizes a program, {FIXED_CALLS} calls where none varies): programs with a "
                     f"trace not explained by a guard: "
                     f"{s.get('traces_programs', 0)}; traces per mode (of {calls} sized calls): " +
                     ", ".join(f"{m} {t}" for m, t in sorted(s["sizes_traces"].items())))
    groups = {"mismatches": [], "errors": [], "accepted": [], "traces": []}
    for k, v in s["classes"].items():
        cat = k.split(" | ")[1]
        group = "errors" if cat.startswith("error:") else "accepted" if cat == "accepted" else \
            "traces" if cat.startswith("traces:") else "mismatches"
        groups[group].append((k, v))
    for title, items in groups.items():
        if items:
            lines.append(f"  {title} by class (kind | what | trigger) [backends], programs, example:")
            lines += [f"    {v['programs']:5d}  {k} [{', '.join(v['backends'])}]  {v['example']}"
                      for k, v in sorted(items, key=lambda kv: -kv[1]["programs"])]
    if s.get("fuzzer_errors"):
        lines.append("  programs the fuzzer itself failed on (a bug in tracegrad/fuzz): " +
                     ", ".join(f"{k} {v}" for k, v in sorted(s["fuzzer_errors"].items())))
    if s["eager_refused"]:
        lines.append("  programs eager itself refused (the backends must raise the same error type): " +
                     ", ".join(f"{k} {v}" for k, v in sorted(s["eager_refused"].items())))
    return "\n".join(lines)
