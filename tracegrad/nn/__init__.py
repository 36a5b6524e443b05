"""tg.nn: modules with parameters, as in torch.nn."""
from . import functional, parallel
from .attention import MultiheadAttention
from .layers import Dropout, Embedding, Flatten
from .loss import BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss, NLLLoss
from .modules import (ELU, GELU, Identity, LayerNorm, LeakyReLU, Linear, LogSoftmax, Module, Parameter, ReLU,
                      Sequential, Sigmoid, SiLU, Softmax, Softplus, Tanh)

__all__ = ["functional", "parallel", "Module", "Parameter", "Linear", "Sequential", "ReLU", "Tanh", "Sigmoid", "GELU", "SiLU", "LeakyReLU", "ELU", "Softplus",
           "LayerNorm", "Softmax", "LogSoftmax", "Identity", "Flatten", "Dropout", "Embedding", "MSELoss",
           "L1Loss", "NLLLoss", "CrossEntropyLoss", "BCELoss", "BCEWithLogitsLoss", "MultiheadAttention"]
