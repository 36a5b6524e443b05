"""The machine's limits and each kernel against them: measured memory bandwidth and matmul rate,
per-kernel shares for `f.profile(*args)`, and the roofline SVG of `f.profile(*args, plot=path)`."""
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .svg import PALETTE, LogAxis, document, el, tick_label

_PEAKS = {}


def peaks():
    """{"GB/s": streaming bandwidth, "GFLOP/s": float32 matmul rate} of this machine, measured once per
    process (a threaded NumPy add over 32 MB arrays; BLAS on 1024x1024 float32), best of a few runs.
    TRACEGRAD_PEAK_GBS / TRACEGRAD_PEAK_GFLOPS set them instead (to compare runs on fixed roofs)."""
    if not _PEAKS:
        gbs, gflops = os.environ.get("TRACEGRAD_PEAK_GBS"), os.environ.get("TRACEGRAD_PEAK_GFLOPS")
        _PEAKS["GB/s"] = float(gbs) if gbs else _bandwidth()
        _PEAKS["GFLOP/s"] = float(gflops) if gflops else _matmul_rate()
    return dict(_PEAKS)


def _best(fn, repeat):
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _bandwidth(n=1 << 23, repeat=5):
    a, b, c = np.ones(n, np.float32), np.ones(n, np.float32), np.empty(n, np.float32)
    parts = os.cpu_count() or 1
    bounds = np.linspace(0, n, parts + 1).astype(int)
    with ThreadPoolExecutor(parts) as pool:            # NumPy releases the GIL: one chunk per core
        def add():
            list(pool.map(lambda i: np.add(a[bounds[i]:bounds[i + 1]], b[bounds[i]:bounds[i + 1]],
                                           out=c[bounds[i]:bounds[i + 1]]), range(parts)))
        add()
        return 3 * a.nbytes / _best(add, repeat) / 1e9


def _matmul_rate(n=1024, repeat=3):
    a = np.ones((n, n), np.float32)
    a @ a
    return 2 * n ** 3 / _best(lambda: a @ a, repeat) / 1e9


def kernel_flops(k):
    """Floating-point operations of a kernel: 2*M*N*K per matrix product (batched), one per op and
    element for fused loops and reductions, 0 for host kernels (NumPy code: not counted)."""
    if k.node is not None:
        if k.node.op != "matmul":
            return 0
        return 2 * math.prod(k.node.out.shape) * k.node.inputs[0].shape[-1]
    return len(k.ops()) * math.prod(k.shape)


def annotate(rows, kernels):
    """Add to each profile row: "flops", "GFLOP/s", "intensity" (flop per byte), "bandwidth share"
    (GB/s over the measured peak) and "compute share" (GFLOP/s over the measured matmul rate). A row's
    "flops" already there are kept (a kernel of symbolic sizes: its count at the profiled call's)."""
    peak = peaks()
    for row, k in zip(rows, kernels):
        flops, sec = row["flops"] if "flops" in row else kernel_flops(k), row["time"]
        row["flops"] = flops
        row["GFLOP/s"] = flops / sec / 1e9 if sec > 0 else float("inf")
        row["intensity"] = flops / row["bytes"] if row["bytes"] else float("inf")
        row["bandwidth share"] = row["GB/s"] / peak["GB/s"]
        row["compute share"] = row["GFLOP/s"] / peak["GFLOP/s"]
    return rows


def roofline_svg(rows, title="kernels on the roofline"):
    """An SVG roofline: x = arithmetic intensity (flop/byte), y = achieved GFLOP/s, both log scale; the
    roof is min(peak GFLOP/s, intensity * peak GB/s); one labelled point per kernel with flops."""
    peak = peaks()
    W, H, L, R, T, B = 760, 480, 70, 30, 40, 60
    pts = [r for r in rows if r.get("flops") and r["time"] > 0]
    ridge = peak["GFLOP/s"] / peak["GB/s"]
    xs = [r["intensity"] for r in pts] + [ridge / 8, ridge * 8]
    ys = [r["GFLOP/s"] for r in pts] + [peak["GFLOP/s"] * 2, min(xs) * peak["GB/s"] / 2]
    x, y = LogAxis(min(xs), max(xs), L, W - R), LogAxis(min(ys), max(ys), H - B, T)
    body = [el("text", title, x=W / 2, y=22, text_anchor="middle", font_size=15)]
    body += _axes(x, y, W, H, L, R, T, B, "arithmetic intensity (flop / byte)", "achieved GFLOP/s")
    roof = [(v, min(peak["GFLOP/s"], v * peak["GB/s"])) for v in (x.lo, ridge, x.hi)]
    body.append(el("polyline", points=" ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in roof), fill="none",
                   stroke="#222", stroke_width=2, class_="roof"))
    body.append(el("text", f"memory {peak['GB/s']:.1f} GB/s", x=x(x.lo) + 6, y=y(roof[0][1]) - 8, font_size=11,
                   fill="#222"))
    body.append(el("text", f"matmul peak {peak['GFLOP/s']:.0f} GFLOP/s", x=W - R - 4, y=y(peak["GFLOP/s"]) - 6,
                   text_anchor="end", font_size=11, fill="#222"))
    for i, r in enumerate(pts):
        c = PALETTE[i % len(PALETTE)]
        px, py = x(r["intensity"]), y(r["GFLOP/s"])
        body.append(el("circle", cx=px, cy=py, r=5, fill=c, class_="kernel"))
        body.append(el("text", f"{r['kernel']} {'+'.join(r['ops'])[:28]}", x=px + 7, y=py + 4, font_size=10, fill=c))
    skipped = [r["kernel"] for r in rows if r not in pts]
    if skipped:
        body.append(el("text", f"not drawn (no flops counted): {', '.join(skipped)}", x=L, y=H - 8, font_size=10,
                       fill="#666"))
    return document(W, H, body, title)


def _axes(x, y, W, H, L, R, T, B, xlabel, ylabel):
    out = [el("rect", x=L, y=T, width=W - L - R, height=H - T - B, fill="none", stroke="#999")]
    for v in x.ticks():
        out.append(el("line", x1=x(v), y1=T, x2=x(v), y2=H - B, stroke="#eee"))
        out.append(el("text", tick_label(v), x=x(v), y=H - B + 16, text_anchor="middle", font_size=10))
    for v in y.ticks():
        out.append(el("line", x1=L, y1=y(v), x2=W - R, y2=y(v), stroke="#eee"))
        out.append(el("text", tick_label(v), x=L - 6, y=y(v) + 4, text_anchor="end", font_size=10))
    out.append(el("text", xlabel, x=(L + W - R) / 2, y=H - B + 36, text_anchor="middle"))
    out.append(el("text", ylabel, x=16, y=(T + H - B) / 2, text_anchor="middle",
                  transform=f"rotate(-90 16 {(T + H - B) / 2:.0f})"))
    return out


def write_roofline(rows, path, title):
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(roofline_svg(rows, title))
    return path
