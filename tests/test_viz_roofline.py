"""Kernel roofline: profile rows' flops, intensity and shares of the machine's peaks; the roofline SVG of
`profile(plot=)`; the bench bars of `bench --plot` (all SVG checked as XML)."""
import math
import xml.etree.ElementTree as ET

import pytest

import tracegrad as tg
from tracegrad.__main__ import main
from tracegrad.viz import roofline
from tracegrad.viz.bars import bench_svg

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def fixed_peaks(monkeypatch):
    monkeypatch.setenv("TRACEGRAD_PEAK_GBS", "20")
    monkeypatch.setenv("TRACEGRAD_PEAK_GFLOPS", "100")
    monkeypatch.setattr(roofline, "_PEAKS", {})
    yield
    roofline._PEAKS.clear()


def _step(x, w, b):
    return ((x @ w + b).relu() * 2.0).sum(axis=1)


def test_profile_rows_carry_flops_intensity_and_shares(fixed_peaks, tmp_path):
    f = tg.compile(_step, backend="llvm")
    x, w, b = tg.randn(16, 32), tg.randn(32, 8), tg.randn(8)
    rows = f.profile(x, w, b, repeat=2, plot=str(tmp_path / "profile.svg"))
    (mm,) = [r for r in rows if r["ops"] == ["matmul"]]
    assert mm["flops"] == 2 * 16 * 32 * 8
    assert mm["bytes"] == (16 * 32 + 32 * 8 + 16 * 8) * 4
    for r in rows:
        assert r["intensity"] == pytest.approx(r["flops"] / r["bytes"])
        assert r["GFLOP/s"] == pytest.approx(r["flops"] / r["time"] / 1e9)
        assert r["bandwidth share"] == pytest.approx(r["GB/s"] / 20)
        assert r["compute share"] == pytest.approx(r["GFLOP/s"] / 100)
    fused = [r for r in rows if r["kind"] != "extern"]
    assert fused and all(r["flops"] == len(r["ops"]) * 16 * 8 for r in fused)

    root = ET.parse(tmp_path / "profile.svg").getroot()
    assert root.tag == SVG + "svg"
    assert len(root.findall(f"{SVG}circle")) == sum(1 for r in rows if r["flops"])
    (roof,) = root.findall(f"{SVG}polyline")
    points = [tuple(map(float, p.split(","))) for p in roof.get("points").split()]
    assert len(points) == 3 and points[1][1] == points[2][1]            # slope, then the flat compute roof
    texts = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    assert "memory 20.0 GB/s" in texts and "matmul peak 100 GFLOP/s" in texts
    assert all(r["kernel"] in texts for r in rows)


def test_measured_peaks_are_positive_and_cached(monkeypatch):
    monkeypatch.delenv("TRACEGRAD_PEAK_GBS", raising=False)
    monkeypatch.delenv("TRACEGRAD_PEAK_GFLOPS", raising=False)
    monkeypatch.setattr(roofline, "_PEAKS", {})
    p = roofline.peaks()
    assert all(math.isfinite(v) and v > 0 for v in p.values())
    assert roofline.peaks() == p


def test_profile_needs_llvm():
    f = tg.compile(_step, backend="interpret")
    with pytest.raises(ValueError, match="needs backend='llvm'"):
        f.profile(tg.randn(2, 3), tg.randn(3, 4), tg.randn(4))


def test_bench_bars():
    rows = [("W1 gelu", {"numpy": 2e-3, "tg eager": 3e-3, "tg compiled": 1e-3}),
            ("W2 softmax", {"numpy": 1e-3, "tg eager": None, "tg compiled": 5e-4}),
            ("W4 mlp", {"numpy": 1e-3})]                # no tracegrad version: no bar, and not FAILED
    root = ET.fromstring(bench_svg(rows, ["numpy", "tg eager", "tg compiled"]))
    bars = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "bar"]
    assert len(bars) == 6
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert texts.count("1.00") == 3 and "1.50" in texts and "0.50" in texts and texts.count("FAILED") == 1
    assert {"W1 gelu", "W2 softmax", "numpy", "tg eager", "tg compiled"} <= set(texts)
    heights = {round(float(b.get("height")), 1) for b in bars}
    assert len(heights) == 3                                              # 1.0, 1.5 and 0.5 of numpy


def test_bench_plot_command(tmp_path, capsys):
    path = tmp_path / "bench.svg"
    assert main(["bench", "--quick", "--repeats", "1", "--workload", "W6", "--plot", str(path)]) == 0
    root = ET.parse(path).getroot()
    assert any(t.text == "W6 broadcast_grad" for t in root.iter(f"{SVG}text"))
    assert f"wrote {path}" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["bench", "--eager", "--plot", str(path)])
