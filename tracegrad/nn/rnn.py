"""Recurrent layers as in torch.nn: RNN (tanh or relu), LSTM and GRU over whole sequences, and
their cells. PyTorch's gate order (LSTM: i, f, g, o; GRU: r, z, n with r scaling the hidden's
linear part b_hn included), parameter names and init U(-1/sqrt(hidden), 1/sqrt(hidden)).

A layer projects the inputs of all steps with one matmul, then each step is one matmul of the
hidden state and elementwise gate math (one fused kernel when compiled)."""
import math
import warnings

from ..tensor import Tensor, cat, stack, zeros
from . import functional as F
from .modules import Module, _uniform


def _tanh_step(gi, h, w_hh, b_hh):
    return (gi + F.linear(h, w_hh, b_hh)).tanh()


def _relu_step(gi, h, w_hh, b_hh):
    return (gi + F.linear(h, w_hh, b_hh)).relu()


def _lstm_step(gi, state, w_hh, b_hh):
    h, c = state
    i, f, g, o = (gi + F.linear(h, w_hh, b_hh)).chunk(4, -1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c.tanh(), c


def _gru_step(gi, h, w_hh, b_hh):
    i_r, i_z, i_n = gi.chunk(3, -1)
    h_r, h_z, h_n = F.linear(h, w_hh, b_hh).chunk(3, -1)
    r, z = (i_r + h_r).sigmoid(), (i_z + h_z).sigmoid()
    n = (i_n + r * h_n).tanh()
    return n + z * (h - n)


def _projected(w_hr):
    """The LSTM step with proj_size: h = (o * tanh(c)) @ weight_hr.T."""
    def step(gi, state, w_hh, b_hh):
        h, c = _lstm_step(gi, state, w_hh, b_hh)
        return F.linear(h, w_hr), c
    return step


# mode -> (gates, step, whether b_hh may be folded into the input projection)
_MODES = {"RNN_TANH": (1, _tanh_step, True), "RNN_RELU": (1, _relu_step, True), "LSTM": (4, _lstm_step, True),
          "GRU": (3, _gru_step, False)}


def _nonlinearity_mode(nonlinearity):
    mode = f"RNN_{nonlinearity}".upper()
    if mode not in ("RNN_TANH", "RNN_RELU") or not isinstance(nonlinearity, str) or not nonlinearity.islower():
        raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
    return mode


def _check_size(name, v, allow_zero=False):
    if not isinstance(v, int) or isinstance(v, bool) or v < (0 if allow_zero else 1):
        raise ValueError(f"{name} must be a positive integer, got {v!r}")


class RNNBase(Module):
    """The multi-layer, optionally bidirectional recurrence shared by RNN, LSTM and GRU."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, dtype=None, device=None):
        super().__init__()
        for name, v in (("input_size", input_size), ("hidden_size", hidden_size), ("num_layers", num_layers)):
            _check_size(name, v)
        _check_size("proj_size", proj_size, allow_zero=True)
        if proj_size and mode != "LSTM":
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1:
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             "element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn(f"dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}",
                          UserWarning, stacklevel=3)
        self.mode, self.input_size, self.hidden_size, self.num_layers = mode, input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, proj_size
        gates, bound, out = _MODES[mode][0], 1.0 / math.sqrt(hidden_size), proj_size or hidden_size
        names = []
        for layer in range(num_layers):
            for suffix in ("", "_reverse")[:self._directions]:
                width = input_size if layer == 0 else out * self._directions
                shapes = {"weight_ih": (gates * hidden_size, width), "weight_hh": (gates * hidden_size, out)}
                if bias:
                    shapes.update(bias_ih=(gates * hidden_size,), bias_hh=(gates * hidden_size,))
                if proj_size:
                    shapes["weight_hr"] = (proj_size, hidden_size)
                for kind, shape in shapes.items():
                    names.append(f"{kind}_l{layer}{suffix}")
                    setattr(self, names[-1], _uniform(shape, bound, dtype, device))
        self._flat_weights_names = names

    @property
    def _directions(self):
        return 2 if self.bidirectional else 1

    @property
    def all_weights(self):
        """The parameters of each layer and direction: [[weight_ih, weight_hh, bias_ih, bias_hh], ...]
        (weight_hr last with proj_size)."""
        per = (4 if self.bias else 2) + bool(self.proj_size)
        ws = [getattr(self, n) for n in self._flat_weights_names]
        return [ws[i:i + per] for i in range(0, len(ws), per)]

    def flatten_parameters(self):
        """PyTorch compacts weights for cuDNN here; tracegrad keeps no such copy, so nothing to do."""

    def _weights(self, layer, direction):
        suffix = "_reverse" if direction else ""
        get = lambda kind: getattr(self, f"{kind}_l{layer}{suffix}", None)     # noqa: E731
        return get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh"), get("weight_hr")

    def _check_hidden(self, h, want, unbatched, what="hx"):
        if not isinstance(h, Tensor):
            raise TypeError(f"{type(self).__name__}: {what} must be a tensor, got {type(h).__name__}")
        if unbatched and h.ndim != 2 or not unbatched and h.ndim != 3:
            raise RuntimeError(f"For {'unbatched 2-D' if unbatched else 'batched 3-D'} input, {what} should also be "
                               f"{'2-D' if unbatched else '3-D'} but got {h.ndim}-D tensor")
        if tuple(h.shape) != want:
            raise RuntimeError(f"Expected hidden size {want}, got {list(h.shape)}")

    def forward(self, input, hx=None):
        if input.ndim not in (2, 3):
            raise ValueError(f"{type(self).__name__}: Expected input to be 2D or 3D, got {input.ndim}D input instead")
        unbatched = input.ndim == 2
        x = input.unsqueeze(1) if unbatched else input.transpose(0, 1) if self.batch_first else input
        if x.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, got "
                               f"{x.shape[-1]}")
        lstm = self.mode == "LSTM"
        layers = self.num_layers * self._directions
        sizes = (self.proj_size or self.hidden_size, self.hidden_size)[:2 if lstm else 1]
        if hx is None:
            states = tuple(zeros((layers, x.shape[1], n), dtype=x.dtype, device=x.device) for n in sizes)
            states = states if lstm else states[0]
        else:
            if lstm and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
                raise TypeError("LSTM: hx must be a tuple (h_0, c_0)")
            for what, h, n in zip(("h_0", "c_0"), hx, sizes) if lstm else [("hx", hx, sizes[0])]:
                self._check_hidden(h, (layers, n) if unbatched else (layers, x.shape[1], n), unbatched, what)
            states = tuple(hx) if lstm else hx
            if unbatched:
                states = tuple(h.unsqueeze(1) for h in hx) if lstm else hx.unsqueeze(1)
        out, finals = self._layers(x, states, lstm)
        out = out.squeeze(1) if unbatched else out.transpose(0, 1) if self.batch_first else out
        finals = [stack(f).squeeze(1) if unbatched else stack(f) for f in finals]
        return out, (tuple(finals) if lstm else finals[0])

    def _layers(self, x, states, lstm):
        """Run every layer and direction over x (seq, batch, features): the last layer's output and
        the final states, listed per layer and direction ([h_n] or [h_n, c_n])."""
        _, step, fold = _MODES[self.mode]
        finals = ([], []) if lstm else ([],)
        for layer in range(self.num_layers):
            outs = []
            for d in range(self._directions):
                k = layer * self._directions + d
                state = (states[0][k], states[1][k]) if lstm else states[k]
                w_ih, w_hh, b_ih, b_hh, w_hr = self._weights(layer, d)
                if fold and b_ih is not None:
                    b_ih, b_hh = b_ih + b_hh, None
                out, state = _sequence(step if w_hr is None else _projected(w_hr), x, state, w_ih, w_hh, b_ih, b_hh,
                                       reverse=d == 1)
                outs.append(out)
                for acc, s in zip(finals, state if lstm else (state,)):
                    acc.append(s)
            x = outs[0] if len(outs) == 1 else cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        return x, finals

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        for name, default in (("num_layers", 1), ("bias", True), ("batch_first", False), ("dropout", 0.0),
                              ("bidirectional", False), ("proj_size", 0)):
            if getattr(self, name) != default:
                s += f", {name}={getattr(self, name)}"
        return s


def _sequence(step, x, state, w_ih, w_hh, b_ih, b_hh, reverse):
    """One direction of one layer: the input projection of all L steps as one matmul, then the
    recurrence. Returns the outputs (L, N, H) in time order and the final state."""
    length, batch, width = x.shape
    gi = F.linear(x.reshape(length * batch, width), w_ih, b_ih).reshape(length, batch, -1)
    hs = [None] * length
    for t in (reversed(range(length)) if reverse else range(length)):
        state = step(gi[t], state, w_hh, b_hh)
        hs[t] = state[0] if isinstance(state, tuple) else state
    return stack(hs), state


class RNN(RNNBase):
    """Elman RNN: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or relu)."""

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, dtype=None, device=None):
        super().__init__(_nonlinearity_mode(nonlinearity), input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, dtype=dtype, device=device)
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """Long short-term memory; forward returns (output, (h_n, c_n))."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, dtype=None, device=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, dtype, device)


class GRU(RNNBase):
    """Gated recurrent unit; forward returns (output, h_n)."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, dtype=None, device=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         dtype=dtype, device=device)


class RNNCellBase(Module):
    """One step of a recurrence: weight_ih, weight_hh, bias_ih, bias_hh."""

    def __init__(self, mode, input_size, hidden_size, bias, dtype, device):
        super().__init__()
        _check_size("input_size", input_size)
        _check_size("hidden_size", hidden_size)
        self.mode, self.input_size, self.hidden_size, self.bias = mode, input_size, hidden_size, bias
        gates, bound = _MODES[mode][0], 1.0 / math.sqrt(hidden_size)
        self.weight_ih = _uniform((gates * hidden_size, input_size), bound, dtype, device)
        self.weight_hh = _uniform((gates * hidden_size, hidden_size), bound, dtype, device)
        self.bias_ih = _uniform((gates * hidden_size,), bound, dtype, device) if bias else None
        self.bias_hh = _uniform((gates * hidden_size,), bound, dtype, device) if bias else None

    def forward(self, input, hx=None):
        name = type(self).__name__
        if input.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        lstm = self.mode == "LSTM"
        hs = (hx if lstm else (hx,)) if hx is not None else ()
        for h in hs:
            if not isinstance(h, Tensor) or h.ndim != input.ndim:
                raise RuntimeError(f"{name}: Expected hidden to be {input.ndim}D (as the input), got "
                                   f"{getattr(h, 'ndim', type(h).__name__)}")
        if hx is None:
            h0 = zeros(tuple(input.shape[:-1]) + (self.hidden_size,), dtype=input.dtype, device=input.device)
            hx = (h0, h0) if lstm else h0
        gi = F.linear(input, self.weight_ih, self.bias_ih)
        return _MODES[self.mode][1](gi, tuple(hx) if lstm else hx, self.weight_hh, self.bias_hh)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            s += ", bias=False"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s


class RNNCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", dtype=None, device=None):
        super().__init__(_nonlinearity_mode(nonlinearity), input_size, hidden_size, bias, dtype, device)
        self.nonlinearity = nonlinearity


class LSTMCell(RNNCellBase):
    """Returns (h', c')."""

    def __init__(self, input_size, hidden_size, bias=True, dtype=None, device=None):
        super().__init__("LSTM", input_size, hidden_size, bias, dtype, device)


class GRUCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, dtype=None, device=None):
        super().__init__("GRU", input_size, hidden_size, bias, dtype, device)
