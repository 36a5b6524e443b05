"""`python -m tracegrad fuzz`: random programs run eagerly and under each backend, compared.

generate (programs.py, expressions.py, training.py) -> check and shrink (runner.py, compare.py for
the tolerances) -> a summary, and one runnable .py file per failing program (source.py renders it;
harness.py is what it imports)."""
from .programs import KINDS, generate
from .runner import BACKENDS, check, fuzz

__all__ = ["BACKENDS", "KINDS", "check", "fuzz", "generate"]
