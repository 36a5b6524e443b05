"""@compile: trace once per signature, optimize, derive the backward graph, run, write back.

  function.py    tg.compile, the compiled function: its cache of entries, retraces, stats
  dynamic.py     symbolic sizes: which dims are symbols, the entry of a symbolic trace
  signature.py   the signature of a call (what must match to reuse an entry)
  guards.py      what an entry assumed about state outside its arguments, checked per call
  capture.py     trace one call into a forward graph and the plan of its effects
  pipeline.py    the stage list: trace, reverse mode, optimize, remat, optimize, fuse and lower
  entry.py       one compiled signature and its call
  writeback.py   in-place updates and .grad writes applied to the caller's tensors
  aliases.py     results that are inputs, their .grad, or views of inputs or of other results
  node.py        the autograd node of a compiled call, and what its backward reads
  check.py       check=True: compiled kernels against the interpret backend
  introspect.py  IR text of each stage, kernels, DOT, profile, dumps
"""
from .dynamic import mark_dynamic, mark_static
from .function import BACKENDS, CompiledFunction, compile, make_ir
from .introspect import to_dot

__all__ = ["BACKENDS", "CompiledFunction", "compile", "make_ir", "mark_dynamic", "mark_static", "to_dot"]
