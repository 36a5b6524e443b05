"""The documentation runs: every ```python block of README.md and docs/*.md is executed, in order, one
namespace per file (like a notebook); an ```output block right after a python block is what that block
must print. Output, shell and pseudo-code blocks carry another fence language (text, bash, ir, ...).
Links point at files in the repository; docs/api.md names every public name."""
import contextlib
import io
import os
import re
import traceback
import types
from pathlib import Path

import pytest

import tracegrad as tg
from tracegrad.ops import PRIMS

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)


def blocks(path):
    """[(language, code, line)] of the fenced blocks of a page (top-level fences only)."""
    text = path.read_text(encoding="utf-8")
    return [(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1) for m in FENCE.finditer(text)]


@pytest.mark.parametrize("path", PAGES, ids=[p.name for p in PAGES])
def test_every_python_block_runs_and_prints_its_output(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)                    # pictures and files the examples write land here
    monkeypatch.setenv("NO_COLOR", "1")
    namespace = {"__name__": "__docs__"}
    found = blocks(path)
    ran = 0
    for k, (lang, code, line) in enumerate(found):
        if lang != "python":
            continue
        ran += 1
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(code, f"{path.name}:{line}", "exec"), namespace)
        except Exception:
            pytest.fail(f"{path.name}, the block at line {line}, raised:\n{traceback.format_exc(limit=-4)}")
        if k + 1 < len(found) and found[k + 1][0] == "output":
            expected = found[k + 1][1]
            got = "\n".join(s.rstrip() for s in out.getvalue().rstrip().splitlines())
            want = "\n".join(s.rstrip() for s in expected.rstrip().splitlines())
            assert got == want, f"{path.name}, the block at line {line} printed:\n{got}\nthe page says:\n{want}"
    assert ran, f"{path.name} has no python block"


def test_fences_are_labelled():
    """Every block of docs/ says what it is (python runs; output, text, bash, ... do not); interactive
    transcripts are written as python + output instead, so that they run."""
    for path in PAGES:
        for lang, _, line in blocks(path):
            assert lang or path.name == "README.md", f"{path.name}:{line}: give the fence a language"
            assert lang not in ("pycon", "py", "python3"), f"{path.name}:{line}: write python + output instead"


def test_readme_starts_with_the_two_commands():
    """Labelled by a trailing comment each; the second is what CI runs."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.startswith("```\n")
    first = [line.split("  #")[0].strip() for line in blocks(ROOT / "README.md")[0][1].strip().splitlines()]
    assert len(first) == 2 and first[1] == "python -m pytest -q -p no:cacheprovider"
    assert first[0].startswith("python -m venv .venv && ") and first[0].endswith("python examples/mlp_train.py")
    ci = (ROOT / ".ci" / "run").read_text()
    assert first[1] in ci


def test_links_point_into_the_repository():
    link = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
    for path in PAGES:
        text = FENCE.sub("", path.read_text(encoding="utf-8"))
        for target in link.findall(text):
            assert not re.match(r"[a-z]+://", target), f"{path.name}: {target} is outside the repository"
            file = target.split("#")[0]
            if file:
                assert (path.parent / file).resolve().is_file(), f"{path.name}: {target} does not exist"
        assert "shared/" not in text, f"{path.name} points at the shared folder users do not have"


def _public():
    """Every public name: tracegrad's, its public modules', and Tensor's methods and properties."""
    names = {f"tg.{n}" for n in dir(tg) if not n.startswith("_") and not isinstance(getattr(tg, n), types.ModuleType)}
    names -= {"tg.composites", "tg.core", "tg.modes", "tg.ops", "tg.printing", "tg.pytree", "tg.trace"}
    for mod, prefix in ((tg.nn, "nn"), (tg.nn.functional, "F"), (tg.optim, "optim"), (tg.ir, "tg.ir"),
                        (tg.viz, "tg.viz"), (tg.cuda, "tg.cuda")):
        public = getattr(mod, "__all__", None) or [n for n in dir(mod) if _defined_for(mod, n)]
        names |= {f"{prefix}.{n}" for n in public if not isinstance(getattr(mod, n, None), types.ModuleType)}
    names |= {f"Tensor.{n}" for n in dir(tg.Tensor) if not n.startswith("_")}
    return names - {"F.legacy_reduction"}          # a helper the module imports, not an API


def _defined_for(mod, n):
    """A public name of a module without __all__: tracegrad's own, and not just a top-level tg name imported."""
    obj = getattr(mod, n)
    return (not n.startswith("_") and getattr(obj, "__module__", "").startswith("tracegrad")
            and getattr(tg, n, None) is not obj)


def _declared():
    """The public names of the primitives that declare their surface (core.Surface): their row of the
    API reference is in the declaration, which docs/api.md prints (its "Declared primitives" block)."""
    return {n for p in PRIMS.values() if p.surface is not None for n in p.surface.names()}


def test_api_reference_names_every_public_name():
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`([A-Za-z_][\w.]*)", text)) | _declared()
    missing = sorted(n for n in _public() if n not in documented and n.split(".")[-1] not in _grouped(text, n))
    assert not missing, ("docs/api.md does not mention these public names; add each to its table with its "
                         f"PyTorch counterpart and the differences: {', '.join(missing)}")


def _grouped(text, name):
    """Names listed in a row of their section: `Tensor.` rows name methods bare (`add`, `sub`, ...)."""
    prefix = name.rsplit(".", 1)[0]
    section = re.search(rf"<!-- names: {re.escape(prefix)} -->(.*?)<!-- end -->", text, re.S)
    return set(re.findall(r"`([A-Za-z_]\w*)", section.group(1))) if section else set()


def test_declared_surfaces_are_reached_as_declared():
    """Each declared name exists (tg.<name>, the method, its in-place form), says its PyTorch name,
    and is printed by docs/api.md's block of declared rows."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    assert "p.surface.row()" in text
    for p in PRIMS.values():
        if p.surface is not None:
            s = p.surface
            assert s.torch in getattr(tg, s.name).__doc__ and callable(getattr(tg.Tensor, s.name + "_"))
            assert s.row().startswith(f"| `tg.{s.name}(") and s.row().count("|") == 4


def test_help_of_compile_explains_the_options():
    doc = tg.compile.__doc__
    for option in ("backend", "fuse", "check", "cache_size"):
        assert f"- {option}:" in doc, option
    assert '"interpret"' in doc and "tg.CheckError" in doc and "f.ir(" in doc and "f.draw(" in doc
