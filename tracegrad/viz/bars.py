"""`python -m tracegrad bench --plot bench.svg`: the bench table as grouped bars, one group per
workload, one bar per column (NumPy, tracegrad eager and compiled, peers), height = time relative to
NumPy in the same run (log scale), each bar labelled with its ratio."""
from .svg import PALETTE, LogAxis, document, el, tick_label


def bench_svg(rows, columns, title="tracegrad bench: median time per call relative to NumPy"):
    """rows: [(workload label, {column: median seconds, or None when the column failed})]; a column missing
    from a row's dict has no version of that workload (no bar)."""
    ratios = [{c: (t / times["numpy"] if t is not None and times.get("numpy") else None) for c, t in times.items()}
              for _, times in rows]
    known = [r for rr in ratios for r in rr.values() if r]
    W = max(640, 90 + len(rows) * (len(columns) * 30 + 56))
    H, L, R, T, B = 460, 70, 20, 70, 90
    y = LogAxis(min(known + [1.0]) / 1.5, max(known + [1.0]) * 1.5, H - B, T)
    body = [el("text", title, x=W / 2, y=22, text_anchor="middle", font_size=15)]
    for i, c in enumerate(columns):                       # legend
        lx = L + i * 130
        body.append(el("rect", x=lx, y=36, width=12, height=12, fill=PALETTE[i % len(PALETTE)]))
        body.append(el("text", c, x=lx + 16, y=46, font_size=11))
    body.append(el("rect", x=L, y=T, width=W - L - R, height=H - T - B, fill="none", stroke="#999"))
    for v in y.ticks():
        body.append(el("line", x1=L, y1=y(v), x2=W - R, y2=y(v), stroke="#eee"))
        body.append(el("text", tick_label(v), x=L - 6, y=y(v) + 4, text_anchor="end", font_size=10))
    body.append(el("line", x1=L, y1=y(1.0), x2=W - R, y2=y(1.0), stroke="#444", stroke_dasharray="4 3"))
    body.append(el("text", "time / NumPy time (log; lower is faster)", x=16, y=(T + H - B) / 2,
                   text_anchor="middle", transform=f"rotate(-90 16 {(T + H - B) / 2:.0f})"))
    group_w = (W - L - R) / max(len(rows), 1)
    bar_w = min(28, (group_w - 24) / max(len(columns), 1))
    for g, ((label, _), rr) in enumerate(zip(rows, ratios)):
        x0 = L + g * group_w + (group_w - bar_w * len(columns)) / 2
        for i, c in enumerate(columns):
            x, r = x0 + i * bar_w, rr.get(c)
            if c not in rr:
                continue
            if r is None:
                body.append(el("text", "FAILED", x=x + bar_w / 2, y=H - B - 4, fill="#c00", font_size=9,
                               text_anchor="start", transform=f"rotate(-90 {x + bar_w / 2:.1f} {H - B - 4})"))
                continue
            top = y(r)
            body.append(el("rect", x=x + 1, y=top, width=bar_w - 2, height=H - B - top,
                           fill=PALETTE[i % len(PALETTE)], class_="bar"))
            body.append(el("text", f"{r:.2f}", x=x + bar_w / 2, y=top - 3, text_anchor="middle", font_size=9))
        body.append(el("text", label, x=L + (g + 0.5) * group_w, y=H - B + 16, text_anchor="middle", font_size=11))
    return document(W, H, body, title)


def write_bench(rows, columns, path):
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(bench_svg(rows, columns))
    return path
