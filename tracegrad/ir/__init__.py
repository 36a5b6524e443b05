"""tg.ir: the typed SSA graph, its text format (print/parse), the interpreter and the verifier."""
from .graph import Graph, Node, Value
from .interpret import run
from .parser import IRParseError, parse
from .printer import print_graph
from .verify import IRVerifyError, verify

__all__ = ["Graph", "Node", "Value", "run", "parse", "print_graph", "verify", "IRParseError", "IRVerifyError"]
