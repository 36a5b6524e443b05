"""Graphviz DOT text and the `Drawing` object that carries it: `str()` / `.source` is DOT, `.render(path)`
runs Graphviz's `dot` program, and Jupyter shows it through `_repr_svg_`."""
import os
import shutil
import subprocess


class GraphvizMissing(RuntimeError):
    """`dot` (Graphviz) is needed to turn DOT text into a picture and is not installed."""


def quote(text):
    """A DOT double-quoted string; newlines become centred line breaks."""
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def attrs(**kw):
    """DOT attribute list: attrs(shape="box", label="a") -> [shape="box", label="a"]."""
    return "[" + ", ".join(f"{k}={quote(v)}" for k, v in kw.items() if v is not None) + "]"


class Drawing:
    """A graph picture. `str(d)` and `d.source` are its Graphviz DOT text; `d.render("graph.svg")` (or
    .png, .pdf) writes the picture through Graphviz's `dot`; `d.pipe("svg")` returns the bytes."""

    def __init__(self, source, name="graph"):
        self.source, self.name = source, name

    def __str__(self):
        return self.source

    def __repr__(self):
        return f"<tracegrad.viz.Drawing {self.name!r}: {self.source.count(chr(10)) + 1} lines of DOT>"

    def pipe(self, format="svg"):
        """The picture as bytes in `format` (svg, png, pdf, ...), made by Graphviz's `dot`."""
        exe = shutil.which("dot")
        if exe is None:
            raise GraphvizMissing(
                f"drawing {format!r} needs Graphviz's `dot` program, which is not on PATH. Install it "
                f"(Debian/Ubuntu: `apt-get install graphviz`; macOS: `brew install graphviz`; conda: "
                f"`conda install graphviz`), or use the DOT text: str(drawing) / drawing.source.")
        r = subprocess.run([exe, f"-T{format}"], input=self.source.encode(), capture_output=True)
        if r.returncode != 0:
            raise RuntimeError(f"dot -T{format} failed: {r.stderr.decode(errors='replace').strip()}")
        return r.stdout

    def render(self, path, format=None):
        """Write the picture to `path`; the format comes from its extension (.svg, .png, .pdf) unless
        given. A `.dot`/`.gv` path gets the DOT text itself (no Graphviz needed). Returns the path."""
        fmt = format or os.path.splitext(path)[1].lstrip(".").lower()
        if not fmt:
            raise ValueError(f"cannot tell the picture format of {path!r}: give it an extension "
                             f"(.svg, .png, .pdf, .dot) or format=")
        if fmt in ("dot", "gv"):
            with open(path, "w") as fh:
                fh.write(self.source + "\n")
            return path
        data = self.pipe(fmt)
        with open(path, "wb") as fh:
            fh.write(data)
        return path

    def _repr_svg_(self):
        """Jupyter's rich display; None (the text repr instead) when Graphviz is not installed."""
        try:
            return self.pipe("svg").decode()
        except GraphvizMissing:
            return None
