"""`tg.viz.backward_steps(loss, path)`: one self-contained HTML page (no network, no external scripts)
that steps through a backward pass node by node: forward values first, then each gradient as it is
computed and accumulated. Previous/Next buttons and the arrow keys move; `#step=N` opens step N."""
import html
import json

import numpy as np

from .autograd_graph import AutogradGraph, summary

BOX_W, BOX_H, GAP_X, GAP_Y, MARGIN = 290, 74, 24, 44, 16


def backward_steps(loss, path="steps.html", names=None, gradient=None):
    """Write the stepper page for the graph behind `loss` to `path` and return the path. Call it before
    `loss.backward()` (or after `backward(retain_graph=True)`): it replays the backward pass with the
    VJP rules the engine uses, reading saved tensors, without touching `.grad`. `names` labels leaves
    (e.g. `dict(model.named_parameters())`); run the forward under `tg.viz.record()` to see every
    forward value (otherwise values the graph does not keep show as "not kept")."""
    g = AutogradGraph(loss, names)
    events = g.steps(gradient)          # before drawing: fills .grad of the boxes as it goes
    boxes = g.boxes
    titles = _titles(boxes)
    pos = _layout(boxes)
    steps = _steps(g, events, titles)
    data = {"boxes": [{"key": b.key, "title": titles[b.key], "type": _type(b), "kind": b.kind} for b in boxes],
            "steps": steps}
    page = _PAGE.format(svg=_svg(boxes, pos, titles), data=json.dumps(data).replace("</", "<\\/"),
                        title=html.escape(titles[g.root_key]))
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(page)
    return path


def _titles(boxes):
    """What each box is called on the page: ops numbered in forward order ("sub #7": one op name may
    appear many times), leaves by their given name."""
    titles, k = {}, 0
    for b in boxes:
        if b.kind == "op":
            titles[b.key], k = f"{b.op} #{k}", k + 1
        elif b.name:
            titles[b.key] = f"{b.name} (leaf)" if b.kind == "leaf" else b.name
        else:
            titles[b.key] = "leaf" if b.kind == "leaf" else "constant"
    return titles


def _type(b):
    return f"{b.shape} {str(b.dtype).replace('tracegrad.', '')}"


def _full(arr):
    if arr is None:
        return "not kept by the graph (run the forward under tg.viz.record() to keep it)"
    return np.array2string(np.asarray(arr), precision=4, threshold=64, edgeitems=3, suppress_small=True)


def _steps(g, events, titles):
    """Step 0 shows the inputs; then one step per op in forward order (its value); then the backward
    events. Each step: what it says, which box it is about, and the box texts it sets."""
    inputs = [b for b in g.boxes if b.kind != "op"]
    steps = [{"text": "Forward pass: the inputs. Leaves (blue) will receive gradients; constants (grey) will not.",
              "focus": None, "edge": None,
              "set": [[b.key, "value", summary(b.value) if b.value is not None else "not kept", _full(b.value)]
                      for b in inputs]}]
    for b in g.boxes:
        if b.kind != "op":
            continue
        args = ", ".join(titles[src] for src, _ in b.inputs)
        shown = summary(b.value) if b.value is not None else "not kept"
        steps.append({"text": f"Forward: {b.op}({args}) = {shown}", "focus": b.key, "edge": None,
                      "set": [[b.key, "value", shown, _full(b.value)]]})
    current = None
    for ev in events:
        key, arr, title = ev["key"], ev["array"], titles[ev["key"]]
        shown, edge = summary(arr), None
        if ev["kind"] == "seed":
            current = key
            text = f"Backward starts: the gradient of {title} with respect to itself is {shown} (the seed)."
        elif ev["kind"] == "grad":
            current = key
            text = f"Backward: the gradient of {title} is complete: {shown}. Its VJP rule ({ev['via']}) runs next."
        else:
            edge = [key, current] if current is not None else None
            sender = f"{titles[current]} ({ev['via']})" if current is not None else ev["via"]
            if ev["kind"] == "send":
                text = f"Backward: {sender} sends a gradient to its input {ev['input']}, {title}: {shown}"
            else:
                text = (f"Backward: {sender} adds a gradient to its input {ev['input']}, {title}, which "
                        f"already had one; the sum so far: {shown}")
        steps.append({"text": text, "focus": key, "edge": edge, "set": [[key, "grad", shown, _full(arr)]]})
    steps.append({"text": "Done: every leaf holds its gradient (what loss.backward() accumulates into .grad).",
                  "focus": None, "edge": None, "set": []})
    return steps


def _layout(boxes):
    """Layers from the inputs (bottom) to the result (top), each input just below the first op reading
    it; within a layer, boxes ordered by the mean position of the boxes reading them (top down).
    Returns {key: (x, y)} of each box's top-left corner."""
    layer, readers = {}, {}
    for b in boxes:                                     # forward order: inputs before the ops reading them
        layer[b.key] = 0 if b.kind != "op" else 1 + max((layer[s] for s, _ in b.inputs), default=-1)
        for src, _ in b.inputs:
            readers.setdefault(src, []).append(b.key)
    for b in boxes:
        if b.kind != "op" and b.key in readers:
            layer[b.key] = min(layer[r] for r in readers[b.key]) - 1
    depth = max(layer.values())
    rows = [[b for b in boxes if layer[b.key] == li] for li in range(depth + 1)]
    order = {}
    for r in reversed(rows):
        r.sort(key=lambda b: sum(order[k] for k in readers.get(b.key, ())) / max(len(readers.get(b.key, ())), 1))
        for i, b in enumerate(r):
            order[b.key] = i - (len(r) - 1) / 2
    width = max(len(r) for r in rows)
    pos = {}
    for li, r in enumerate(rows):
        offset = (width - len(r)) * (BOX_W + GAP_X) / 2
        for i, b in enumerate(r):
            pos[b.key] = (MARGIN + offset + i * (BOX_W + GAP_X), MARGIN + (depth - li) * (BOX_H + GAP_Y))
    return pos


def _svg(boxes, pos, titles):
    width = max(x for x, _ in pos.values()) + BOX_W + MARGIN
    height = max(y for _, y in pos.values()) + BOX_H + MARGIN
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
             f'viewBox="0 0 {width:.0f} {height:.0f}"><defs><marker id="arrow" viewBox="0 0 10 10" refX="10" '
             f'refY="5" markerUnits="userSpaceOnUse" markerWidth="9" markerHeight="9" orient="auto"><path d="M 0 0 L 10 5 L 0 10 z"/>'
             f'</marker></defs>']
    for b in boxes:
        x1, y1 = pos[b.key]
        for src, _ in b.inputs:
            x0, y0 = pos[src]
            parts.append(f'<line class="edge" data-from="{src}" data-to="{b.key}" x1="{x0 + BOX_W / 2:.0f}" '
                         f'y1="{y0:.0f}" x2="{x1 + BOX_W / 2:.0f}" y2="{y1 + BOX_H:.0f}" marker-end="url(#arrow)"/>')
    for b in boxes:
        x, y = pos[b.key]
        parts.append(f'<g class="box {b.kind}" id="box-{b.key}" transform="translate({x:.0f},{y:.0f})">'
                     f'<rect width="{BOX_W}" height="{BOX_H}" rx="8"/>'
                     f'<text x="10" y="17" class="title">{html.escape(titles[b.key])}</text>'
                     f'<text x="10" y="34">{html.escape(_type(b))}</text>'
                     f'<text x="10" y="51" class="value" id="value-{b.key}"></text>'
                     f'<text x="10" y="68" class="grad" id="grad-{b.key}"></text></g>')
    parts.append("</svg>")
    return "".join(parts)


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<title>backward pass of {title}</title>
<style>
body {{ font-family: Helvetica, Arial, sans-serif; margin: 16px; color: #222; }}
#bar {{ position: sticky; top: 0; background: #fff; padding: 8px 0; border-bottom: 1px solid #ddd; }}
button {{ font-size: 15px; padding: 4px 14px; }}
#counter {{ margin: 0 12px; font-weight: bold; }}
#text {{ margin-top: 8px; min-height: 2.6em; }}
#detail {{ background: #f6f6f6; padding: 6px; max-height: 12em; overflow: auto; font-size: 12px; }}
.box rect {{ fill: #fff; stroke: #555; stroke-width: 1.2; }}
.box.leaf rect {{ fill: #e8f0fe; }}
.box.const rect {{ fill: #eee; }}
.box.focus rect {{ stroke: #d00; stroke-width: 3; }}
.box text {{ font-size: 11px; font-family: Menlo, Consolas, monospace; }}
.box text.title {{ font-weight: bold; font-family: Helvetica, Arial, sans-serif; }}
.box text.grad {{ fill: #b00; }}
.edge {{ stroke: #888; stroke-width: 1.2; }}
.edge.active {{ stroke: #d00; stroke-width: 3; }}
</style></head>
<body>
<div id="bar"><button id="prev" type="button">&larr; Previous</button><span id="counter"></span><button id="next" type="button">Next &rarr;</button>
<span style="color:#777; margin-left: 12px">arrow keys move too</span>
<div id="text"></div><pre id="detail"></pre></div>
{svg}
<script type="application/json" id="data">{data}</script>
<script>
"use strict";
const data = JSON.parse(document.getElementById("data").textContent);
const steps = data.steps;
const titles = Object.fromEntries(data.boxes.map((b) => [b.key, b.title]));
let current = 0;
function show(k, scroll = true) {{
  current = Math.max(0, Math.min(steps.length - 1, k));
  for (const b of data.boxes) {{
    document.getElementById("value-" + b.key).textContent = "";
    document.getElementById("grad-" + b.key).textContent = "";
    document.getElementById("box-" + b.key).classList.remove("focus");
  }}
  let detail = "";
  for (let i = 0; i <= current; i++) {{
    for (const [key, field, text, full] of steps[i].set) {{
      document.getElementById(field + "-" + key).textContent = (field === "grad" ? "grad: " : "value: ") + text;
      if (i === current) detail += (field === "grad" ? "gradient" : "value") + " of " + titles[key] + ":\\n" + full + "\\n";
    }}
  }}
  const step = steps[current];
  if (step.focus) {{
    const box = document.getElementById("box-" + step.focus);
    box.classList.add("focus");
    if (scroll && box.scrollIntoView) box.scrollIntoView({{ block: "nearest", inline: "nearest" }});
  }}
  for (const e of document.querySelectorAll(".edge")) {{
    e.classList.toggle("active", !!step.edge && e.dataset.from === step.edge[0] && e.dataset.to === step.edge[1]);
  }}
  document.getElementById("counter").textContent = "step " + (current + 1) + " / " + steps.length;
  document.getElementById("text").textContent = step.text;
  document.getElementById("detail").textContent = detail;
  document.getElementById("prev").disabled = current === 0;
  document.getElementById("next").disabled = current === steps.length - 1;
  document.body.dataset.step = String(current);
}}
document.getElementById("prev").addEventListener("click", () => show(current - 1));
document.getElementById("next").addEventListener("click", () => show(current + 1));
document.addEventListener("keydown", (ev) => {{
  if (ev.key === "ArrowRight" || ev.key === "ArrowDown") {{ show(current + 1); ev.preventDefault(); }}
  else if (ev.key === "ArrowLeft" || ev.key === "ArrowUp") {{ show(current - 1); ev.preventDefault(); }}
  else if (ev.key === "Home") show(0);
  else if (ev.key === "End") show(steps.length - 1);
}});
const params = new URLSearchParams(location.hash.slice(1));
show(parseInt(params.get("step") || "0", 10) || 0, false);
for (const what of (params.get("press") || "").split(",").filter(Boolean)) {{
  if (what === "next" || what === "prev") document.getElementById(what).click();
  else document.dispatchEvent(new KeyboardEvent("keydown", {{ key: what }}));
}}
</script>
</body></html>
"""
