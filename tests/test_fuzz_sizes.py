"""The fuzzer's size-sequence mode (`python -m tracegrad fuzz --sizes`): programs compiled once and called
across sizes mixing 1, 0 and others, against eager; a wrong cache hit and an unexplained retrace are reported."""
import numpy as np

from tracegrad.fuzz import generate, runner
from tracegrad.fuzz.programs import GRAPH_RUN
from tracegrad.fuzz.runner import Observation
from tracegrad.fuzz.sizes import FIXED_CALLS, SizedProgram, compare_sized, plan, size_class, trace_problems
from tracegrad.fuzz.source import Program

MODES = ["llvm/dynamic", "llvm"]


def _program(body, inputs, returns=("v0",)):
    return Program("graph", 0, 1, "float64", inputs, body, list(returns), GRAPH_RUN)


def test_plan_mixes_one_zero_and_other_sizes_in_each_dimension():
    for i in range(40):
        p = generate(i, 3)
        steps = plan(p)
        assert len(steps) == (6 if steps[0] else FIXED_CALLS) and steps[0] == {v: v for v in steps[0]}  # as generated
        for v in steps[0]:
            seq = [s[v] for s in steps]
            assert 1 in seq and 0 in seq and len({n for n in seq if n > 1}) >= 2, (i, v, seq)
            assert len(seq) > len(set(seq))                                     # a size comes back: a cache hit
        if p.kind == "train":
            assert set(steps[0]) <= {p.inputs[0][1][0]}                         # only the batch varies
    assert size_class({3: 5, 17: 1}) == size_class({3: 2, 17: 1}) != size_class({3: 0, 17: 1})


def test_default_fuzz_programs_are_unchanged_by_the_mode():
    p = generate(5, 1)
    assert "resize" not in p.source() and "compiled(" not in p.source()
    src = SizedProgram(p).source()
    assert "resize(" in src and "use_sizes(sizes)" in src and "tg.compile(" not in src


def test_compiled_once_across_sizes_agrees_with_eager():
    """Broadcasting against a size-1 partner, reductions, matmul, cross-entropy: no problem in either mode,
    and with dynamic=True no more traces than 0/1/>1 classes of the sizes."""
    programs = [
        _program(["v0 = (x0 * x1).tanh().sum(1)", "v1 = v0 - v0.sum()"], [("x0", (3, 17), {"grad": True}),
                                                                            ("x1", (1, 17), {"grad": True})], ["v1"]),
        _program(["v0 = tg.nn.functional.softmax(x0 @ x1, -1)"], [("x0", (2, 3), {"grad": True}),
                                                                  ("x1", (3, 17), {"grad": True})]),
        _program(["v0 = tg.nn.functional.cross_entropy(x0, x1)"], [("x0", (5, 3), {"grad": True}),
                                                                   ("x1", (5,), {"labels": 3})]),
    ]
    for p in programs:
        sp = SizedProgram(p)
        run = runner.load(sp)
        err, problems = runner.check(sp, MODES)
        assert err is None and problems == [], problems
        obs = runner.observe(run, "llvm/dynamic", "float64")
        traces = sum(t for _, calls in obs.traces for t, _ in calls)
        assert 1 <= traces <= len({size_class(s) for s in sp.plan}), obs.traces


def test_a_wrong_cache_hit_is_reported(monkeypatch):
    """squeeze(0) decides on the size (B != 1): with the shape guards made to always pass, the entry traced
    at 3 serves size 1 and returns (1, 4) where eager gives (4,): the fuzzer reports it."""
    from tracegrad.jit import dynamic
    sp = SizedProgram(_program(["v0 = x0.squeeze(0) * 2.0"], [("x0", (3, 4), {})]),
                      [{3: 3}, {3: 5}, {3: 1}, {3: 7}])
    assert runner.check(sp, MODES) == (None, [])
    monkeypatch.setattr(dynamic.SymbolicEntry, "shape_failure", lambda self, leaves: None)
    err, problems = runner.check(sp, MODES)
    assert {b for b, _, _ in problems} == set(MODES)
    assert all(cat == "shape" and text.startswith("size2.") for _, cat, text in problems), problems
    assert runner.classify(sp, problems)[0][2] == "sizes 3->1"


def test_a_lost_symbolic_compile_is_reported(monkeypatch):
    """A symbolic compile that fails falls back to a compile per size (values right): the fuzzer still
    reports it, once per mode, as traces:symbolic-failure naming why."""
    from tracegrad.jit import dynamic
    sp = SizedProgram(_program(["v0 = x0 * 2.0"], [("x0", (3, 4), {})]), [{3: 3}, {3: 5}, {3: 7}])
    assert runner.check(sp, MODES) == (None, [])

    def fail(self, leaves):
        raise KeyError("symbol B is not bound")
    monkeypatch.setattr(dynamic.SymbolicEntry, "program_for", fail)
    err, problems = runner.check(sp, MODES)
    failures = [(b, text) for b, cat, text in problems if cat == "traces:symbolic-failure"]
    assert sorted(b for b, _ in failures) == sorted(MODES) and all("KeyError" in t for _, t in failures), problems
    assert all(cat != "traces:unexplained" for _, cat, _ in problems), problems     # each retrace says why


def test_retraces_without_a_guard_are_reported():
    sp = SizedProgram(_program(["v0 = x0 * 2.0"], [("x0", (3, 4), {})]), [{3: 3}, {3: 5}, {3: 7}])
    items = [(f"size{k}.out0", np.zeros(1)) for k in range(3)]

    def problems(calls, mode="llvm/dynamic"):
        return [c for c, _ in trace_problems(sp, Observation(items, traces=[("f", calls)]), mode)]
    assert problems([(1, []), (0, []), (0, [])]) == []
    assert problems([(1, []), (0, []), (1, [])]) == ["traces:unexplained"]
    same = [(1, []), (1, ["x0: dim 0 became symbolic B (3 -> 5)"]), (0, [])]
    assert problems(same) == ["traces:same-class"] and problems(same, "llvm") == []
    assert problems([(1, []), (1, ["guard B == 3 failed (B = 5)"]), (0, [])]) == []


def test_a_size_where_only_eager_raises_is_accepted_there():
    raised = np.array(["IndexError", "IndexError: index 3 is out of bounds"], object)
    eager = Observation([("size0.out0", np.ones(2)), ("size1.raised", raised), ("size2.out0", np.ones(2))])
    same = Observation([("size0.out0", np.ones(2)), ("size1.raised", raised), ("size2.out0", np.ones(2))])
    other = Observation([("size0.out0", np.ones(2)), ("size1.out0", np.ones(2)), ("size2.out0", np.ones(2))])
    assert compare_sized(eager, same, eager, "float64") == []
    assert [(c, t.split(":")[0]) for c, t in compare_sized(eager, other, eager, "float64")] == [("accepted", "size1.")]


def test_fuzz_sizes_summary(tmp_path):
    s = runner.fuzz(3, 7, backends=("llvm",), out=str(tmp_path), kinds=["graph"], sizes=True, log=lambda *a: None)
    assert s["backends"] == MODES and set(s["sizes_traces"]) <= set(MODES) and "traces_programs" in s
    assert "across sizes (6 sizes a program, 2 calls where none varies)" in runner.format_summary(s)
    assert s["sized_calls"] == sum(len(plan(generate(i, 7, kind="graph"))) for i in range(3))


def test_a_program_with_no_varying_size_is_called_twice():
    """Sizes 0 and 1 only (broadcasting partners, kept): the plan repeats the same shapes, so two calls (the
    trace and a cache hit) check what six would; a program with a size above 1 keeps its six."""
    fixed = _program(["v0 = x0 * 2.0"], [("x0", (1, 1), {}), ("x1", (0,), {})])
    assert plan(fixed) == [{}, {}] and len(plan(_program(["v0 = x0 * 2.0"], [("x0", (1, 3), {})]))) == 6
    sp = SizedProgram(fixed)
    assert runner.check(sp, MODES) == (None, [])
    obs = runner.observe(runner.load(sp), "llvm", "float64")
    assert [len(calls) for _, calls in obs.traces] == [2]
