"""A seed-fixed slice of `python -m tracegrad fuzz --backend cuda` under the simulator: generated
programs (straight-line code over odd and empty shapes, in-place updates, training steps) compiled
for cuda give what eager gives on the cpu, values and gradients."""
import pytest

from tracegrad.fuzz import fuzz


@pytest.mark.parametrize("kinds,n", [(["graph"], 6), (["inplace", "train"], 3)])
def test_fuzz_slice_cuda_agrees_with_eager(tmp_path, kinds, n):
    s = fuzz(n, 3, backends=["cuda"], kinds=kinds, out=str(tmp_path), do_shrink=False, log=lambda *a: None)
    assert s["programs"] == n and not s["fuzzer_errors"], s
    assert s["mismatch_programs"] == 0 and s["error_programs"] == 0, s["classes"]


def test_fuzz_command_line_takes_the_cuda_backend(tmp_path, capsys):
    from tracegrad.__main__ import main
    assert main(["fuzz", "--n", "1", "--kind", "graph", "--seed", "1", "--backend", "interpret,cuda", "--out",
                 str(tmp_path)]) == 0
    assert "eager vs interpret, cuda" in capsys.readouterr().out
