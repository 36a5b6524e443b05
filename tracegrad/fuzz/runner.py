"""Run generated programs eagerly and under each backend, compare, shrink what fails, summarize."""
import collections
import linecache
import os
import time
import warnings

from .compare import compare_runs
from .programs import KINDS, generate

BACKENDS = ("interpret", "llvm")
SHRINK_PER_CLASS = 3   # failing programs shrunk per class (kind, backend, category); later ones are written as is


class Observation:
    """What one run recorded: items [(label, array)], or the error it raised (type name, message)."""

    def __init__(self, items=(), error=None):
        self.items, self.error = list(items), error


def observe(run, mode, dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return Observation(run(mode, dtype).items)
        except RecursionError as e:
            return Observation(error=("RecursionError", str(e)[:200]))
        except Exception as e:  # noqa: BLE001 -- any error is an observation to compare
            return Observation(error=(type(e).__name__, (str(e).splitlines() or [""])[0][:300]))


def load(program):
    """The program's `run` function, from its source (registered with linecache for tracebacks)."""
    src = program.source()
    name = f"<tracegrad-fuzz {program.seed}:{program.index}>"
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    ns = {"__name__": "tracegrad_fuzz_program", "__file__": name}
    exec(compile(src, name, "exec"), ns)
    return ns["run"]


def check(program, backends=BACKENDS):
    """(eager error or None, [(backend, category, text)]) for one program."""
    run = load(program)
    eager = observe(run, "eager", program.dtype)
    ref = observe(run, "eager", "float64") if program.dtype == "float32" else eager
    problems = []
    for b in backends:
        problems += [(b, cat, text) for cat, text in compare_runs(eager, observe(run, b, program.dtype), ref,
                                                                   program.dtype)]
    return eager.error, problems


def shrink(program, backend, cat, budget=60):
    """Remove statements and returned values while `backend` still shows a problem of class `cat`."""
    def fails(p):
        nonlocal budget
        budget -= 1
        try:
            _, probs = check(p, (backend,))
        except SyntaxError:
            return False
        return any(c == cat for _, c, _ in probs)

    changed = True
    while changed and budget > 0:
        changed = False
        for i in reversed(range(len(program.body))):
            if budget <= 0:
                break
            cand = program.replace(body=program.body[:i] + program.body[i + 1:])
            if fails(cand):
                program, changed = cand, True
        for i in reversed(range(len(program.calls))):
            if len(program.calls) > 1 and budget > 0:
                cand = program.replace(calls=program.calls[:i] + program.calls[i + 1:])
                if fails(cand):
                    program, changed = cand, True
        for name in list(program.returns):
            if len(program.returns) > 1 and budget > 0:
                cand = program.replace(returns=[r for r in program.returns if r != name])
                if fails(cand):
                    program, changed = cand, True
    return program


def write_repro(program, problems, out):
    """Write the program as a runnable file named after its first problem; return its path."""
    backend, cat, _ = problems[0]
    slug = cat.replace(":", "-").replace(".", "_")
    path = os.path.join(out, f"{program.kind}-{backend}-{slug}-s{program.seed}-n{program.index}.py")
    head = "".join(f"# {b}: {c}: {t}\n" for b, c, t in problems[:8])
    with open(path, "w") as fh:
        fh.write(head + program.source())
    return path


def fuzz(n, seed, backends=BACKENDS, out="fuzz-failures", start=0, kinds=None, dtype=None, do_shrink=True,
         log=print):
    """Generate and check programs start..start+n-1 of stream `seed`; write failing ones into `out`;
    return the summary (a dict) and print it."""
    from ..jit import BACKENDS as known
    for b in backends:
        if b not in known:
            raise ValueError(f"unknown backend {b!r}; expected one of {', '.join(known)}")
    if kinds:
        for k in kinds:
            if k not in KINDS:
                raise ValueError(f"unknown program kind {k!r}; expected one of {', '.join(KINDS)}")
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    by_kind, eager_errors = collections.Counter(), collections.Counter()
    classes, examples, failed = collections.Counter(), {}, 0
    for i in range(start, start + n):
        program = generate(i, seed, dtype=dtype, kind=kinds[i % len(kinds)] if kinds else None)
        by_kind[program.kind] += 1
        eager_error, problems = check(program, backends)
        if eager_error:
            eager_errors[f"{program.kind} {eager_error[0]}"] += 1
        if not problems:
            continue
        failed += 1
        keys = sorted({(b, c) for b, c, _ in problems})
        for b, c in keys:
            classes[(program.kind, b, c)] += 1
        b, c = keys[0]
        small = shrink(program, b, c) if do_shrink and classes[(program.kind, b, c)] <= SHRINK_PER_CLASS else program
        _, small_problems = check(small, backends) if small is not program else (None, problems)
        path = write_repro(small, small_problems or problems, out)
        for b, c in keys:
            examples.setdefault((program.kind, b, c), path)
        log(f"  program {i} ({program.kind}, {program.dtype}): {'; '.join(f'{b} {c}' for b, c in keys)} -> {path}")
    summary = dict(seed=seed, start=start, programs=n, seconds=round(time.time() - t0, 1), by_kind=dict(by_kind),
                   failing_programs=failed, classes={" | ".join(k): v for k, v in classes.items()},
                   examples={" | ".join(k): v for k, v in examples.items()}, eager_errors=dict(eager_errors),
                   backends=list(backends))
    log(format_summary(summary))
    return summary


def format_summary(s):
    mism = {k: v for k, v in s["classes"].items() if " | error:" not in k and not k.endswith("| accepted")}
    errs = {k: v for k, v in s["classes"].items() if " | error:" in k}
    acc = {k: v for k, v in s["classes"].items() if k.endswith("| accepted")}
    lines = [f"tracegrad fuzz: {s['programs']} programs (seed {s['seed']}, from {s['start']}; "
             f"eager vs {', '.join(s['backends'])}) in {s['seconds']} s",
             "  by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(s["by_kind"].items())),
             f"  programs with a difference: {s['failing_programs']}; "
             f"mismatches (silent wrong results): {sum(mism.values())}; "
             f"errors (backend raised, eager did not): {sum(errs.values())}; "
             f"accepted (eager raised, backend did not): {sum(acc.values())}"]
    for title, group in (("mismatches by class (kind | backend | what)", mism),
                         ("errors by type (kind | backend | error)", errs),
                         ("accepted (kind | backend)", acc)):
        if group:
            lines.append(f"  {title}:")
            lines += [f"    {v:5d}  {k}   e.g. {s['examples'][k]}" for k, v in sorted(group.items(), key=lambda kv: -kv[1])]
    if s["eager_errors"]:
        lines.append("  programs eager itself refused (same error expected from backends): " +
                     ", ".join(f"{k} {v}" for k, v in sorted(s["eager_errors"].items())))
    return "\n".join(lines)
