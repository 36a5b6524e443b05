"""Read the IR text format back into a Graph (exact round trip with the printer)."""
import ast
import re

from ..dtypes import from_name
from ..symint import SymInt, parse_expr
from .graph import Graph

_TYPE = re.compile(r"^(\w+)\[([^\]]*)\]$")
_HEADER = re.compile(r"^graph\s+([\w.]+)\((.*)\)\s*\{$")
_NODE = re.compile(r"^%([\w.]+):\s*(\S+)\s*=\s*(\w+)\((.*?)\)(?:\s*\{(.*)\})?$")


class IRParseError(ValueError):
    pass


def _type(text, line, sizes):
    m = _TYPE.match(text.strip())
    if not m:
        raise IRParseError(f"bad type {text!r} in line: {line}")
    try:
        shape = tuple(_size(parse_expr(s), sizes) for s in m.group(2).split(",") if s.strip())
    except ValueError as e:
        raise IRParseError(f"bad type {text!r} in line: {line}: {e}") from None
    return shape, from_name(m.group(1))


def _size(expr, sizes):
    """An int, or a SymInt whose hint is its value under `sizes` (symbols not given: 0)."""
    if expr.is_const():
        return expr.constant()
    return SymInt(expr, expr.evaluate({n: sizes.get(n, 0) for n in expr.symbols()}))


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


def _value(text, sizes):
    text = text.strip()
    try:
        return from_name(text)
    except ValueError:
        pass
    if text in ("inf", "-inf", "nan"):
        return float(text)
    tree = ast.parse(text.replace("inf", "1e999").replace("nan", "None"), mode="eval")
    try:
        return ast.literal_eval(tree)
    except ValueError:          # sizes with symbols: (B, 784), T-1
        return _symbolic(tree.body, sizes)


def _symbolic(node, sizes):
    """A literal whose ints may be size expressions over symbol names."""
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_symbolic(e, sizes) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, (ast.Name, ast.BinOp, ast.UnaryOp)):
        return _size(parse_expr(ast.unparse(node)), sizes)
    return ast.literal_eval(node)


GRADS_OF = "# grads of:"


def _strip_comment(line):
    return line.split("#", 1)[0].rstrip()


def parse(text, sizes=None):
    """Parse IR text into a Graph (comments ignored, but for a backward graph's `# grads of:`).
    Sizes may be expressions over symbols (f32[B,784]): SymInts valued by `sizes` {name: int}."""
    sizes = sizes or {}
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
        shape, dtype = _type(typ, lines[0], sizes)
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
        shape, dtype = _type(typ, line, sizes)
        inputs = [_ref(env, a, line) for a in _split_top(args)] if args.strip() else []
        kv = {}
        for item in _split_top(attrs or ""):
            k, _, v = item.partition("=")
            kv[k.strip()] = _value(v, sizes)
        env[name] = g.add(op, inputs, kv, shape, dtype)
    return g


def _ref(env, text, line):
    key = text.strip().lstrip("%")
    if key not in env:
        raise IRParseError(f"undefined value %{key} in line: {line}")
    return env[key]
