"""A small reader for the DOT subset tracegrad writes: nodes with attributes, edges, nested clusters."""
import re

_TOKEN = re.compile(r'\s*(?:("(?:[^"\\]|\\.)*")|(->)|([\[\]{};,=])|([A-Za-z0-9_.#%-]+))')


def _tokens(text):
    pos, out = 0, []
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise SyntaxError(f"DOT: unexpected text at {pos}: {text[pos:pos + 30]!r}")
        q, arrow, punct, ident = m.groups()
        out.append(("str", bytes(q[1:-1], "utf-8").decode("unicode_escape")) if q else
                   ("op", arrow or punct) if (arrow or punct) else ("id", ident))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


class Dot:
    def __init__(self, text):
        self.nodes, self.edges, self.clusters = {}, [], {}
        toks = _tokens(text)
        assert toks[0] == ("id", "digraph"), toks[:2]
        i = 2 if toks[1][0] in ("id", "str") else 1
        assert toks[i] == ("op", "{")
        end = self._block(toks, i + 1, None)
        assert end == len(toks), "text after the closing brace"

    def _attrs(self, toks, i):
        attrs = {}
        assert toks[i] == ("op", "[")
        i += 1
        while toks[i] != ("op", "]"):
            k, eq, v = toks[i], toks[i + 1], toks[i + 2]
            assert eq == ("op", "=") and k[0] in ("id", "str"), toks[i:i + 3]
            attrs[k[1]] = v[1]
            i += 3
            if toks[i] == ("op", ","):
                i += 1
        return attrs, i + 1

    def _block(self, toks, i, cluster):
        while True:
            t = toks[i]
            if t == ("op", "}"):
                return i + 1
            if t == ("op", ";"):
                i += 1
            elif t == ("id", "subgraph"):
                name = toks[i + 1][1]
                assert toks[i + 2] == ("op", "{")
                self.clusters[name] = {"parent": cluster, "nodes": [], "attrs": {}}
                i = self._block(toks, i + 3, name)
            elif t[1] in ("graph", "node", "edge") and toks[i + 1] == ("op", "["):
                _, i = self._attrs(toks, i + 1)
            elif toks[i + 1] == ("op", "="):
                if cluster is not None:
                    self.clusters[cluster]["attrs"][t[1]] = toks[i + 2][1]
                i += 3
            elif toks[i + 1] == ("op", "->"):
                a, b = t[1], toks[i + 2][1]
                i += 3
                attrs = {}
                if toks[i] == ("op", "["):
                    attrs, i = self._attrs(toks, i)
                self.edges.append((a, b, attrs))
            else:
                attrs = {}
                i += 1
                if toks[i] == ("op", "["):
                    attrs, i = self._attrs(toks, i)
                self.nodes[t[1]] = attrs
                if cluster is not None:
                    self.clusters[cluster]["nodes"].append(t[1])

    def labels(self):
        return {n: a.get("label", n) for n, a in self.nodes.items()}
