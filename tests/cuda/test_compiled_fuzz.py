"""A seed-fixed slice of `python -m tracegrad fuzz --backend cuda` under the simulator: generated
programs (straight-line code over odd and empty shapes, in-place updates, training steps) compiled
for cuda give what eager gives on the cpu, values and gradients."""
import pytest

from tracegrad.fuzz import fuzz


# programs 6-8 of the in-place and training kinds: in-place updates over empty inputs, a training step
# whose parameters are passed as arguments (the other cuda tests pass the model), in-place updates
# beside dropout (programs 0-2 took five times as long under the simulator: two eager Adam runs)
@pytest.mark.parametrize("kinds,start,n", [(["graph"], 0, 6), (["inplace", "train"], 6, 3)])
def test_fuzz_slice_cuda_agrees_with_eager(tmp_path, kinds, start, n):
    s = fuzz(n, 3, backends=["cuda"], kinds=kinds, out=str(tmp_path), start=start, do_shrink=False,
             log=lambda *a: None)
    assert s["programs"] == n and not s["fuzzer_errors"], s
    assert s["mismatch_programs"] == 0 and s["error_programs"] == 0, s["classes"]


def test_fuzz_command_line_takes_the_cuda_backend(tmp_path, capsys):
    from tracegrad.__main__ import main
    assert main(["fuzz", "--n", "1", "--kind", "graph", "--seed", "1", "--backend", "interpret,cuda", "--out",
                 str(tmp_path)]) == 0
    assert "eager vs interpret, cuda" in capsys.readouterr().out
