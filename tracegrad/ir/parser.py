"""Read the IR text format back into a Graph (exact round trip with the printer)."""
import ast
import re

from ..dtypes import from_name
from .graph import Graph

_TYPE = re.compile(r"^(\w+)\[([\d,]*)\]$")
_HEADER = re.compile(r"^graph\s+([\w.]+)\((.*)\)\s*\{$")
_NODE = re.compile(r"^%([\w.]+):\s*(\S+)\s*=\s*(\w+)\((.*?)\)(?:\s*\{(.*)\})?$")


class IRParseError(ValueError):
    pass


def _type(text, line):
    m = _TYPE.match(text.strip())
    if not m:
        raise IRParseError(f"bad type {text!r} in line: {line}")
    shape = tuple(int(s) for s in m.group(2).split(",") if s)
    return shape, from_name(m.group(1))


def _split_top(text):
    """Split at commas not nested in brackets."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return [p.strip() for p in parts]


def _value(text):
    text = text.strip()
    try:
        return from_name(text)
    except ValueError:
        pass
    if text in ("inf", "-inf", "nan"):
        return float(text)
    tree = ast.parse(text.replace("inf", "1e999").replace("nan", "None"), mode="eval")
    return ast.literal_eval(tree)


GRADS_OF = "# grads of:"


def _strip_comment(line):
    return line.split("#", 1)[0].rstrip()


def parse(text):
    """Parse IR text into a Graph (comments ignored, but for a backward graph's `# grads of:`)."""
    grads_of = [l.split(GRADS_OF, 1)[1] for l in text.splitlines() if l.strip().startswith("return") and GRADS_OF in l]
    lines = [_strip_comment(l) for l in text.strip().splitlines()]
    lines = [l for l in lines if l.strip()]
    m = _HEADER.match(lines[0].strip()) if lines else None
    if not m:
        raise IRParseError(f"expected 'graph NAME(...) {{' but got: {lines[0] if lines else '<empty>'}")
    g = Graph(m.group(1))
    if grads_of:
        g.grads_of = [n.strip() for n in grads_of[0].split(",")]
    env = {}
    for part in _split_top(m.group(2)):
        name, _, typ = part.partition(":")
        shape, dtype = _type(typ, lines[0])
        env[name.strip().lstrip("%")] = g.add_input(name.strip().lstrip("%"), shape, dtype)
    for line in lines[1:]:
        s = line.strip()
        if s == "}":
            break
        if s.startswith("return"):
            rest, _, saved = s[len("return"):].partition("; saved ")
            g.outputs = [_ref(env, r, line) for r in _split_top(rest)] if rest.strip() else []
            if saved.strip():
                g.n_saved = len(_split_top(saved))
                g.outputs += [_ref(env, r, line) for r in _split_top(saved)]
            continue
        m = _NODE.match(s)
        if not m:
            raise IRParseError(f"cannot parse line: {line}")
        name, typ, op, args, attrs = m.groups()
        shape, dtype = _type(typ, line)
        inputs = [_ref(env, a, line) for a in _split_top(args)] if args.strip() else []
        kv = {}
        for item in _split_top(attrs or ""):
            k, _, v = item.partition("=")
            kv[k.strip()] = _value(v)
        env[name] = g.add(op, inputs, kv, shape, dtype)
    return g


def _ref(env, text, line):
    key = text.strip().lstrip("%")
    if key not in env:
        raise IRParseError(f"undefined value %{key} in line: {line}")
    return env[key]
