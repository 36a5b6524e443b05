"""Functional autodiff: grad, value_and_grad, vjp, jvp (forward mode) and gradcheck."""
import numpy as np

from . import dtypes as D
from .autograd import _into_grad, run_backward
from .forward import forward_mode
from .modes import enable_grad, no_grad
from .tensor import Tensor, ones_like, tensor, zeros_like


class GradcheckError(RuntimeError):
    """Analytic and numerical gradients disagree."""


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=False):
    """Gradients of `outputs` with respect to `inputs`, like torch.autograd.grad (a tuple)."""
    outputs, inputs = _as_tuple(outputs), _as_tuple(inputs)
    for t in inputs:
        if not isinstance(t, Tensor) or not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    gouts = []
    for o, g in zip(outputs, _as_tuple(grad_outputs)):
        if g is None:
            if o.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            g = ones_like(o)
        gouts.append(g)
    retain = create_graph if retain_graph is None else retain_graph
    return run_backward(outputs, gouts, retain, create_graph, inputs=inputs, allow_unused=allow_unused)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """torch.autograd.backward: accumulate the gradients of `tensors` into the leaves' .grad (only
    into `inputs`, when given)."""
    tensors = _as_tuple(tensors)
    grad_tensors = [None] * len(tensors) if grad_tensors is None else list(_as_tuple(grad_tensors))
    if len(grad_tensors) != len(tensors):
        raise RuntimeError(f"grad_tensors has {len(grad_tensors)} element(s) but tensors has {len(tensors)}")
    gouts = []
    for t, g in zip(tensors, grad_tensors):
        if g is None:
            if t.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            g = ones_like(t)
        gouts.append(g if isinstance(g, Tensor) else tensor(g, dtype=t.dtype))
    retain = create_graph if retain_graph is None else retain_graph
    if inputs is None:
        run_backward(tensors, gouts, retain, create_graph)
        return
    inputs = _as_tuple(inputs)
    grads = run_backward(tensors, gouts, retain, create_graph, inputs=inputs, allow_unused=True)
    for t, g in zip(inputs, grads):
        if g is not None:
            _into_grad(t, g, create_graph)


def _fresh(args, argnums):
    """Copies of the differentiated arguments that are leaves requiring grad."""
    args = list(args)
    for i in argnums:
        a = args[i]
        if not isinstance(a, Tensor):
            raise TypeError(f"argument {i} must be a tensor to be differentiated, got {type(a).__name__}")
        args[i] = a.detach().requires_grad_(True)
    return args


def value_and_grad(f, argnums=0):
    """`value_and_grad(f)(*args)` -> (f(*args), gradient w.r.t. args[argnums]); f returns a scalar."""
    nums = _as_tuple(argnums)

    def wrapped(*args, **kwargs):
        with enable_grad():
            args = _fresh(args, nums)
            value = f(*args, **kwargs)
            if not isinstance(value, Tensor) or value.numel() != 1:
                raise RuntimeError("value_and_grad: the function must return a one-element tensor, got "
                                   f"{getattr(value, 'shape', type(value).__name__)}")
            grads = grad(value, [args[i] for i in nums], allow_unused=True) if value.requires_grad else \
                (None,) * len(nums)
        grads = tuple(zeros_like(args[i]) if g is None else g for g, i in zip(grads, nums))
        return value.detach(), grads if isinstance(argnums, (tuple, list)) else grads[0]
    return wrapped


def vjp(f, *primals):
    """(f(*primals), vjp_fn) where vjp_fn(cotangent) returns one gradient per primal."""
    with enable_grad():
        args = _fresh(primals, range(len(primals)))
        out = f(*args)
    outs = _as_tuple(out)

    def vjp_fn(*cotangents):
        if len(cotangents) == 1 and isinstance(cotangents[0], (tuple, list)):
            cotangents = tuple(cotangents[0])
        if len(cotangents) != len(outs):
            raise ValueError(f"vjp_fn expects {len(outs)} cotangent(s), got {len(cotangents)}")
        for c, o in zip(cotangents, outs):
            if tuple(c.shape) != o.shape:
                raise ValueError(f"cotangent shape {tuple(c.shape)} does not match output shape {o.shape}")
        live = [(o, c) for o, c in zip(outs, cotangents) if o.requires_grad]
        if not live:
            return tuple(zeros_like(a) for a in args)
        gs = run_backward([o for o, _ in live], [c for _, c in live], True, False, inputs=args, allow_unused=True)
        return tuple(zeros_like(a) if g is None else g for g, a in zip(gs, args))

    return (out.detach() if isinstance(out, Tensor) else tuple(o.detach() for o in outs)), vjp_fn


def jvp(f, primals, tangents):
    """Forward mode: (f(*primals), J·tangents), from the primitives' JVP rules."""
    primals, tangents = _as_tuple(primals), _as_tuple(tangents)
    if len(primals) != len(tangents):
        raise ValueError(f"jvp: got {len(primals)} primals but {len(tangents)} tangents")
    args = []
    for p, t in zip(primals, tangents):
        if tuple(p.shape) != tuple(t.shape):
            raise ValueError(f"jvp: tangent shape {tuple(t.shape)} does not match primal shape {tuple(p.shape)}")
        a = p.detach()
        a._tangent = t.detach().to(p.dtype)
        args.append(a)
    with forward_mode(), no_grad():
        out = f(*args)
    outs = _as_tuple(out)
    touts = []
    for o in outs:
        t = o._tangent if o._tangent is not None else zeros_like(o)
        o._tangent = None
        touts.append(t)
    return (out, touts[0]) if isinstance(out, Tensor) else (out, tuple(touts))


def gradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-3):
    """Compare analytic gradients of f at `inputs` with central differences in float64.

    Inputs that do not require grad are held fixed; float32 inputs are checked on float64 copies, on
    their device (cuda tensors: f runs on the device; only the scalars compared come to the host).
    Returns True or raises GradcheckError naming the input, the element and both values."""
    inputs = _as_tuple(inputs)
    xs = []
    for x in inputs:
        if isinstance(x, Tensor) and x.dtype.is_floating_point:
            c = tensor(x.detach(), dtype=D.float64)
            c.requires_grad = x.requires_grad
            xs.append(c)
        else:
            xs.append(x)
    checked = [i for i, x in enumerate(xs) if isinstance(x, Tensor) and x.requires_grad]
    with enable_grad():
        out = f(*xs)
    outs = [o for o in _as_tuple(out) if isinstance(o, Tensor)]
    weights = [tensor(np.random.default_rng(1234 + k).standard_normal(o.shape), dtype=D.float64, device=o.device)
               for k, o in enumerate(outs)]

    def scalar(*args):
        r = _outputs(f, args)
        return sum(float((o.double() * w).sum().detach().item()) for o, w in zip(r, weights))

    live = [(o, w) for o, w in zip(outs, weights) if o.requires_grad]
    if not live:
        analytic = [None] * len(checked)
    else:
        with enable_grad():
            total = sum(((o.double() * w).sum() for o, w in live[1:]), (live[0][0].double() * live[0][1]).sum())
            analytic = grad(total, [xs[i] for i in checked], allow_unused=True)
    for i, a in zip(checked, analytic):
        x = xs[i]
        a = np.zeros(x.shape) if a is None else a.detach().cpu().numpy()
        for k in range(x.numel()):
            num = (scalar(*_nudged(xs, i, k, eps)) - scalar(*_nudged(xs, i, k, -eps))) / (2 * eps)
            ana = a.reshape(-1)[k]
            if not abs(ana - num) <= atol + rtol * abs(num):
                raise _mismatch(f, xs, i, k, eps, atol, rtol)
    return True


def _nudged(xs, i, k, delta):
    """The inputs with element k of input i moved by delta (a fresh leaf that requires grad, so a
    function that itself differentiates, as for second derivatives, runs as it did unperturbed)."""
    arr = xs[i].detach().cpu().numpy().copy()
    arr.reshape(-1)[k] += delta
    args = list(xs)
    args[i] = tensor(arr, dtype=D.float64, device=xs[i].device, requires_grad=True)
    return args


def _outputs(f, args):
    with enable_grad():
        return [o for o in _as_tuple(f(*args)) if isinstance(o, Tensor)]


def _mismatch(f, xs, i, k, eps, atol, rtol):
    """The GradcheckError for input i, element k: the Jacobian column d outputs / d xs[i][k], analytic
    (one backward per output element) and numerical, and the entry that disagrees most."""
    plus, minus = _outputs(f, _nudged(xs, i, k, eps)), _outputs(f, _nudged(xs, i, k, -eps))
    args = list(xs)
    args[i] = xs[i].detach().requires_grad_(True)
    outs = _outputs(f, args)
    worst = None
    for o, (out, p, m) in enumerate(zip(outs, plus, minus)):
        num = (p.detach().double().cpu().numpy() - m.detach().double().cpu().numpy()).reshape(-1) / (2 * eps)
        for j in range(out.numel()):
            ana = 0.0
            if out.requires_grad:
                onehot = np.zeros(out.numel())
                onehot[j] = 1.0
                with enable_grad():
                    (g,) = grad(out, args[i], tensor(onehot.reshape(out.shape), dtype=out.dtype, device=out.device),
                                retain_graph=True, allow_unused=True)
                ana = 0.0 if g is None else float(g.detach().cpu().numpy().reshape(-1)[k])
            excess = abs(ana - num[j]) - (atol + rtol * abs(num[j]))
            if worst is None or excess > worst[0]:
                worst = (excess, o, j, ana, float(num[j]), out.shape)
    shape = xs[i].shape
    idx = tuple(int(v) for v in np.unravel_index(k, shape)) if shape else ()
    _, o, j, ana, num, oshape = worst if worst is not None else (0, 0, 0, 0.0, 0.0, ())
    jdx = tuple(int(v) for v in np.unravel_index(j, oshape)) if oshape else ()
    return GradcheckError(f"Jacobian mismatch for input {i} (shape {shape}) at element {idx}: analytic {ana!r}, "
                          f"numerical {num!r} (the entry d output {o}{list(jdx)} / d input {i}{list(idx)})")
