"""Non-temporal stores write whole lines only: a function streams its widest vector stores through a
streamed pointer and no narrower one (backends/cpu/stream.py's mark), so no cache line is written partly
non-temporally and partly through the cache."""
import re

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.backends.cpu import stream

EPILOGUE = """define internal void @k_body(ptr noalias align 64 %stream0, i64 %lo, i64 %hi) {
entry:
  %p = getelementptr inbounds i8, ptr %stream0, i64 %lo
  %q = getelementptr inbounds i8, ptr %p, i64 768
  store <16 x float> %v, ptr %p, align 32
  store <8 x float> %w, ptr %q, align 32
  ret void
}

define internal void @whole(ptr noalias align 64 %stream0, i64 %lo, i64 %hi) {
entry:
  %p = getelementptr inbounds i8, ptr %stream0, i64 %lo
  %q = getelementptr inbounds i8, ptr %p, i64 64
  store <16 x float> %v, ptr %p, align 64
  store <16 x float> %v, ptr %q, align 64
  store <8 x float> %w, ptr %q, align 32
  ret void
}"""


def test_a_narrow_aligned_store_beside_wider_unaligned_ones_stays_normal():
    out = stream.mark(EPILOGUE).splitlines()
    first = out[:out.index("}") + 1]
    assert not any("!nontemporal" in line for line in first)          # the 800-byte rows' epilogue
    assert "fence seq_cst" not in "\n".join(first)
    second = out[out.index("}") + 1:]
    marked = [line.strip() for line in second if "!nontemporal" in line]
    assert marked == ["store <16 x float> %v, ptr %p, align 64, !nontemporal !0",
                      "store <16 x float> %v, ptr %q, align 64, !nontemporal !0"]


def _vector_bytes(line):
    n, ty = re.search(r"store <(\d+) x (float|double)>", line).groups()
    return int(n) * (4 if ty == "float" else 8)


@pytest.mark.parametrize("shape", [(12, 512, 200), (6, 1024, 203), (40, 65536)])
def test_compiled_outputs_stream_one_vector_width_per_function(shape):
    """A broadcast along the middle axis into rows of 800 bytes (not whole lines), odd rows, and
    whole rows: in each function, every streamed store is as wide as its widest vector store."""
    g = tg.tensor(np.random.default_rng(0).standard_normal((shape[0], shape[-1])).astype(np.float32))
    f = tg.compile(lambda g: g[:, None, :].expand(*shape) * 0.5 if len(shape) == 3 else g * 0.5)
    np.testing.assert_allclose(f(g).numpy(), np.broadcast_to(
        g.numpy()[:, None, :] if len(shape) == 3 else g.numpy(), shape) * 0.5)
    text = f.ir(g, stage="llvm", optimized=True)
    for body in text.split("\ndefine ")[1:]:
        stores = [line for line in body.splitlines() if re.search(r"store <\d+ x (float|double)>", line)]
        widest = max(map(_vector_bytes, stores), default=0)
        assert all(_vector_bytes(line) == widest for line in stores if "!nontemporal" in line), body
