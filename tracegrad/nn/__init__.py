"""tg.nn: modules with parameters, as in torch.nn."""
from . import functional, init, parallel, utils
from .containers import ModuleDict, ModuleList, ParameterDict, ParameterList
from .conv import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d, AvgPool1d, AvgPool2d, AvgPool3d, Conv1d,
                   Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, Fold, MaxPool1d, MaxPool2d, MaxPool3d, Unfold,
                   Upsample)
from .attention import MultiheadAttention
from .layers import Dropout, Embedding, Flatten
from .loss import BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss, NLLLoss
from .normalization import (BatchNorm1d, BatchNorm2d, BatchNorm3d, Dropout1d, Dropout2d, GroupNorm, InstanceNorm1d,
                            InstanceNorm2d)
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from .modules import (ELU, GELU, Identity, LayerNorm, LeakyReLU, Linear, LogSoftmax, Module, Parameter, ReLU,
                      Sequential, Sigmoid, SiLU, Softmax, Softplus, Tanh)

__all__ = ["functional", "parallel", "Module", "Parameter", "Linear", "Sequential", "ReLU", "Tanh", "Sigmoid", "GELU", "SiLU", "LeakyReLU", "ELU", "Softplus",
           "LayerNorm", "Softmax", "LogSoftmax", "Identity", "Flatten", "Dropout", "Embedding", "MSELoss",
           "L1Loss", "NLLLoss", "CrossEntropyLoss", "BCELoss", "BCEWithLogitsLoss",
           "init", "utils", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict",
           "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "MaxPool1d", "MaxPool2d", "MaxPool3d",
           "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d",
           "Upsample", "Unfold", "Fold", "MultiheadAttention",
           "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "InstanceNorm1d", "InstanceNorm2d", "GroupNorm", "Dropout1d",
           "Dropout2d", "RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]
