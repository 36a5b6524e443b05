"""tg.nn: modules with parameters, as in torch.nn."""
from . import functional
from .modules import GELU, LayerNorm, Linear, Module, Parameter, ReLU, Sequential, Sigmoid, Tanh

__all__ = ["functional", "Module", "Parameter", "Linear", "Sequential", "ReLU", "Tanh", "Sigmoid", "GELU",
           "LayerNorm"]
