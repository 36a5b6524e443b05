"""The backward stepper: its replay of the backward pass against the engine, the self-contained page,
and the page in a real headless browser (Debian's `chromium`) when one is installed."""
import json
import os
import re
import shutil
import subprocess
import warnings
from html.parser import HTMLParser

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.viz.autograd_graph import AutogradGraph, summary

from test_compile_fuzz import build, programs

BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


def _loss(record=True):
    tg.manual_seed(0)
    x = tg.randn(4, 3, dtype=tg.float64)
    w = tg.randn(3, 2, dtype=tg.float64, requires_grad=True)
    b = tg.zeros(2, dtype=tg.float64, requires_grad=True)
    with tg.viz.record() if record else _nothing():
        h = (x @ w + b).tanh()
        loss = (h * h + h + 1.0).mean()    # h is read thrice: its gradient is accumulated
    return x, w, b, h, loss


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def test_replay_matches_the_engine_and_leaves_grad_alone():
    x, w, b, h, loss = _loss()
    g = AutogradGraph(loss, {"w": w, "b": b})
    events = g.steps()
    assert w.grad is None and b.grad is None
    gw, gb, gh = tg.grad(loss, [w, b, h], retain_graph=True)
    last = {ev["key"]: ev["array"] for ev in events}
    np.testing.assert_allclose(last[f"t{id(w)}"], gw.numpy(), rtol=1e-12)
    np.testing.assert_allclose(last[f"t{id(b)}"], gb.numpy(), rtol=1e-12)
    tanh_key = f"n{id(h.grad_fn)}_0"
    np.testing.assert_allclose(last[tanh_key], gh.numpy(), rtol=1e-12)
    kinds = [ev["kind"] for ev in events if ev["key"] == tanh_key]
    assert kinds == ["send", "accumulate", "accumulate", "grad"]      # add, then mul twice, then complete
    # oracle by hand: d/dh mean(h*h + h + 1) = (2h + 1) / 8
    np.testing.assert_allclose(gh.numpy(), (2 * h.detach().numpy() + 1) / 8, rtol=1e-12)
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), gw.numpy(), rtol=1e-12)


def test_after_a_freed_backward_it_says_to_retain_the_graph(tmp_path):
    *_, loss = _loss()
    loss.backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        tg.viz.backward_steps(loss, str(tmp_path / "s.html"))


def test_non_scalar_needs_a_gradient(tmp_path):
    x = tg.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="scalar outputs"):
        tg.viz.backward_steps(x * 2, str(tmp_path / "s.html"))
    path = tg.viz.backward_steps(x * 2, str(tmp_path / "s.html"), gradient=tg.ones(3))
    assert os.path.getsize(path) > 0


class _Scan(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.external = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            if k in ("src", "href", "action", "data") and v and not v.startswith("#") and not v.startswith("url(#"):
                self.external.append((tag, k, v))


def _page(tmp_path, record=True):
    x, w, b, h, loss = _loss(record)
    path = tg.viz.backward_steps(loss, str(tmp_path / "steps.html"), names={"w": w, "b": b})
    text = open(path, encoding="utf-8").read()
    data = json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', text, re.S)
                      .group(1).replace("<\\/", "</"))
    return path, text, data, loss


def test_page_is_self_contained_and_orders_forward_before_backward(tmp_path):
    path, text, data, loss = _page(tmp_path)
    scan = _Scan()
    scan.feed(text)
    assert not scan.external and "link" not in scan.tags and "img" not in scan.tags
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in text
    steps = data["steps"]
    n_ops = sum(b["kind"] == "op" for b in data["boxes"])
    fields = [s["set"][0][1] for s in steps[1:-1]]
    assert fields == ["value"] * n_ops + ["grad"] * (len(steps) - 2 - n_ops)
    assert steps[n_ops]["set"][0][2] == summary(loss.detach().numpy())          # the last forward step: the loss
    assert steps[n_ops + 1]["text"].startswith("Backward starts")
    assert all("not kept" not in s["text"] for s in steps)


def test_without_record_unknown_values_say_so(tmp_path):
    _, _, data, _ = _page(tmp_path, record=False)
    # the constant 1.0 is not kept by the graph, so neither is the add reading it nor the mean's sum of
    # that (its division keeps only the divisor); the loss itself is always known
    shown = {s["set"][0][0]: s["set"][0][2] for s in data["steps"][1:] if s["set"] and s["set"][0][1] == "value"}
    titles = {b["key"]: b["title"] for b in data["boxes"]}
    unknown = sorted(titles[k] for k, v in shown.items() if v == "not kept")
    assert unknown == ["add #5", "sum #6"]
    assert [v for v in data["steps"][0]["set"] if v[2] == "not kept"]


def _browser(args, tmp_path):
    profile = tmp_path / f"profile{len(os.listdir(tmp_path))}"
    cmd = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}", "--enable-logging=stderr",
           "--v=0", *args]
    return subprocess.run(cmd, capture_output=True, text=True)


@pytest.mark.skipif(BROWSER is None, reason="no headless browser installed (Debian: apt-get install chromium); "
                                            "the page's structure is still checked above")
def test_page_in_headless_chromium(tmp_path):
    path, _, data, loss = _page(tmp_path)
    url = "file://" + os.path.abspath(path)
    r = _browser(["--dump-dom", url + "#step=2&press=next,next,next,prev,ArrowRight"], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    console = [line for line in r.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, console
    dom = r.stdout
    n = len(data["steps"])
    assert 'data-step="5"' in dom                                  # 2 + next x3 - prev + ArrowRight
    assert f'<span id="counter">step 6 / {n}</span>' in dom
    text = data["steps"][5]["text"].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    assert f'<div id="text">{text}</div>' in dom
    root = next(b for b in data["boxes"] if b["title"].startswith("div #"))
    r = _browser(["--dump-dom", url + f"#step={n - 1}"], tmp_path)
    assert f'value: {summary(loss.detach().numpy())}' in r.stdout and "grad: 1" in r.stdout
    assert 'id="next" type="button" disabled' in r.stdout.replace('disabled=""', "disabled")
    assert root["kind"] == "op"
    shot = tmp_path / "steps.png"
    r = _browser(["--window-size=1100,900", f"--screenshot={shot}", url + "#step=12"], tmp_path)
    assert r.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10000


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(prog=programs(), seed=st.integers(0, 2**16))
def test_replay_matches_the_engine_on_generated_programs(prog, seed):
    """Every leaf's last replayed gradient is the engine's; every op's forward value is known under
    record() and equals what the program computed."""
    shapes, steps, outs = prog
    rng = np.random.default_rng(seed)
    args = [tg.tensor(rng.standard_normal(s), dtype=tg.float64, requires_grad=True) for s in shapes]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tg.BroadcastWarning)
        with tg.viz.record():
            results = build(steps, outs, len(shapes))(*args)
            loss = sum((r * tg.tensor(rng.standard_normal(r.shape))).sum() for r in results)
        g = AutogradGraph(loss)
        events = g.steps()
        want = tg.grad(loss, args, allow_unused=True)
    last = {ev["key"]: ev["array"] for ev in events}
    for a, w in zip(args, want):
        got = last.get(f"t{id(a)}")
        if w is None:
            assert got is None
        else:
            np.testing.assert_allclose(got, w.numpy(), rtol=1e-12, atol=1e-12)
    assert all(b.value is not None for b in g.boxes if b.kind == "op")
    for r in results:
        if r.grad_fn is not None:
            np.testing.assert_array_equal(g.box(f"n{id(r.grad_fn)}_{r._oi}").value, r.detach().numpy())


def test_a_compiled_call_inside_the_graph_is_one_box_per_output(tmp_path):
    @tg.compile
    def f(x, w):
        h = (x @ w).tanh()
        return h, h.sum()

    x, w = tg.randn(3, 4, dtype=tg.float64), tg.randn(4, 2, dtype=tg.float64, requires_grad=True)
    with tg.viz.record():
        h, s = f(x, w)
        loss = (h * 2.0).sum() + s
    g = AutogradGraph(loss, {"w": w})
    assert sorted(b.op for b in g.boxes if b.kind == "op") == ["add", "compiled f [0]", "compiled f [1]", "mul", "sum"]
    events = g.steps()
    gw, = tg.grad(loss, [w], retain_graph=True)
    np.testing.assert_allclose(events[-1]["array"], gw.numpy(), rtol=1e-12)
    assert events[-1]["key"] == f"t{id(w)}" and events[-1]["kind"] == "send"
    assert tg.viz.backward_steps(loss, str(tmp_path / "c.html"))
