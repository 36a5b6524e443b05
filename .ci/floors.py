"""The declared floors of the runtime dependencies (pyproject.toml's `name>=version`), pinned, on one
line: what .ci/run installs exactly, in a venv of their own, to run the smoke tests on them."""
import pathlib
import re

PYPROJECT = pathlib.Path(__file__).resolve().parent.parent / "pyproject.toml"


def floors(text=None):
    """{name: version} of the `dependencies = [...]` list."""
    text = PYPROJECT.read_text() if text is None else text
    deps = re.search(r"^dependencies = \[(.*?)\]", text, re.M | re.S).group(1)
    return dict(re.findall(r'"([A-Za-z0-9_.-]+)>=([0-9][0-9.]*)', deps))


if __name__ == "__main__":
    print(" ".join(f"{name}=={version}" for name, version in floors().items()))
