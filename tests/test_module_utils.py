"""nn.Module's registries and walks (parameters, buffers, containers), state_dict / load_state_dict,
.to(), forward hooks and Tensor.register_hook, gradient clipping — names, orders, messages and numbers
as torch 2.13 gives them (literals)."""
import math
import types

import numpy as np
import pytest

import tracegrad as tg

nn = tg.nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("steps", tg.zeros((), dtype=tg.int64))
        self.enc = nn.Linear(2, 3)
        self.blocks = nn.ModuleList([nn.Linear(3, 3), nn.Sequential(nn.Linear(3, 1), nn.ReLU())])
        self.scales = nn.ParameterList([nn.Parameter(tg.ones(1)), nn.Parameter(tg.ones(2))])
        self.heads = nn.ModuleDict({"b": nn.Linear(1, 1), "a": nn.Linear(1, 2)})
        self.register_buffer("tmp", tg.zeros(1), persistent=False)
        self.alpha = nn.Parameter(tg.ones(()))
        self.shared = self.enc


def test_names_and_orders_match_torch():
    n = Net()
    assert list(n.state_dict()) == [
        "alpha", "steps", "enc.weight", "enc.bias", "blocks.0.weight", "blocks.0.bias", "blocks.1.0.weight",
        "blocks.1.0.bias", "scales.0", "scales.1", "heads.b.weight", "heads.b.bias", "heads.a.weight", "heads.a.bias",
        "shared.weight", "shared.bias"]
    assert [k for k, _ in n.named_parameters()] == [
        "alpha", "enc.weight", "enc.bias", "blocks.0.weight", "blocks.0.bias", "blocks.1.0.weight", "blocks.1.0.bias",
        "scales.0", "scales.1", "heads.b.weight", "heads.b.bias", "heads.a.weight", "heads.a.bias"]
    assert [k for k, _ in n.named_buffers()] == ["steps", "tmp"]
    assert [k for k, _ in n.named_children()] == ["enc", "blocks", "scales", "heads"]
    assert [k for k, _ in n.named_modules()] == ["", "enc", "blocks", "blocks.0", "blocks.1", "blocks.1.0", "blocks.1.1",
                                                 "scales", "heads", "heads.b", "heads.a"]


def test_walks_are_iterators():
    n = Net()
    for walk in (n.parameters(), n.named_parameters(), n.buffers(), n.named_buffers(), n.children(),
                 n.named_children(), n.modules(), n.named_modules()):
        assert isinstance(walk, types.GeneratorType)
    assert next(n.parameters()) is n.alpha
    assert next(n.buffers()) is n.steps and next(n.children()) is n.enc and next(n.modules()) is n
    assert len(list(n.parameters(recurse=False))) == 1
    assert [k for k, _ in n.named_parameters(prefix="m", recurse=False)] == ["m.alpha"]


def test_load_state_dict_reports_keys_as_torch():
    n = Net()
    sd = n.state_dict()
    sd.pop("enc.bias")
    sd["extra"] = tg.zeros(1)
    sd["alpha"] = tg.ones(3)
    with pytest.raises(RuntimeError) as e:
        n.load_state_dict(sd)
    assert str(e.value) == (
        'Error(s) in loading state_dict for Net:\n\tMissing key(s) in state_dict: "enc.bias". \n\tUnexpected key(s) '
        'in state_dict: "extra". \n\tsize mismatch for alpha: copying a param with shape tracegrad.Size([3]) from '
        'checkpoint, the shape in current model is tracegrad.Size([]).')
    sd["alpha"] = tg.full((), 4.0)
    sd["steps"] = tg.tensor(9)
    res = n.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["enc.bias"] and res.unexpected_keys == ["extra"]
    assert float(n.alpha) == 4.0 and int(n.steps) == 9 and n.alpha.requires_grad
    assert repr(n.load_state_dict(n.state_dict())) == "<All keys matched successfully>"


def test_buffers_state_dict_and_to():
    n = Net()
    assert "tmp" not in n.state_dict() and "steps" in n.state_dict()
    sd = n.state_dict()
    assert not sd["enc.weight"].requires_grad
    with tg.no_grad():
        n.enc.weight.mul_(0.0)
    assert float(sd["enc.weight"].abs().sum()) == 0.0       # detached, sharing memory, as torch
    steps, tmp, w = n.steps, n.tmp, n.enc.weight
    assert n.double() is n
    assert n.tmp is tmp and n.tmp.dtype == tg.float64 and n.steps is steps and n.steps.dtype == tg.int64
    assert n.enc.weight is w and w.dtype == tg.float64 and w.requires_grad
    n.steps = tg.tensor(3)                                  # assigning a tensor keeps it a buffer
    assert "steps" in dict(n.named_buffers()) and int(n.state_dict()["steps"]) == 3
    with pytest.raises(TypeError, match="floating point"):
        n.to(tg.int32)
    with pytest.raises(KeyError, match="already exists"):
        n.register_buffer("training", None)
    with pytest.raises(KeyError, match="buffer name can.+t contain"):
        n.register_buffer("a.b", None)


def test_parameter_requires_grad_false_is_registered():
    m = nn.Module()
    m.frozen = nn.Parameter(tg.ones(2), requires_grad=False)
    m.plain = tg.ones(2)                                    # a plain tensor attribute: not registered
    assert [k for k, _ in m.named_parameters()] == ["frozen"] and list(m.state_dict()) == ["frozen"]
    m.frozen = None
    assert list(m.named_parameters()) == [] and "frozen" in m._params
    del m.frozen
    assert "frozen" not in m._params


def test_a_plain_tensor_cannot_replace_a_parameter():
    lin = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="as parameter 'weight' \\(nn.Parameter or None expected\\)"):
        lin.weight = lin.weight * 2
    assert "weight" in dict(lin.named_parameters())
    lin.weight = nn.Parameter(tg.zeros(2, 2))
    assert float(dict(lin.named_parameters())["weight"].abs().sum()) == 0.0
    lin.bias = lin.bias.detach()                            # a leaf without grad: still the parameter (frozen)
    assert list(dict(lin.named_parameters())) == ["weight", "bias"] and not lin.bias.requires_grad
    lin.requires_grad_(False)
    state = {k: v + 1 for k, v in lin.state_dict().items()}
    lin.load_state_dict(state, assign=True)                 # frozen parameters replaced, still registered
    assert list(dict(lin.named_parameters())) == ["weight", "bias"] and lin.weight is not None
    assert float(lin.weight.sum()) == 4.0


def test_containers_behave_as_lists_and_dicts():
    ml = nn.ModuleList([nn.ReLU(), nn.Tanh()])
    ml.append(nn.Sigmoid())
    ml.insert(0, nn.Identity())
    ml += [nn.GELU()]
    assert [type(m).__name__ for m in ml] == ["Identity", "ReLU", "Tanh", "Sigmoid", "GELU"] and len(ml) == 5
    assert isinstance(ml[-1], nn.GELU) and type(ml[1:3]) is nn.ModuleList and len(ml[1:3]) == 2
    del ml[0]
    assert [k for k, _ in ml.named_children()] == ["0", "1", "2", "3"] and isinstance(ml[0], nn.ReLU)
    with pytest.raises(IndexError):
        ml[9]
    with pytest.raises(TypeError, match="holds modules"):
        ml.append(3)
    md = nn.ModuleDict({"x": nn.Linear(1, 1)})
    md["y"] = nn.ReLU()
    assert list(md) == ["x", "y"] and "y" in md and len(md) == 2 and md.keys() == ["x", "y"]
    assert isinstance(md.pop("y"), nn.ReLU) and list(md) == ["x"]
    pl = nn.ParameterList([tg.zeros(2)])
    assert pl[0].requires_grad and pl[0].is_leaf                 # made a parameter
    pd = nn.ParameterDict({"w": tg.ones(3)})
    pd.update({"v": tg.zeros(1)})
    assert [k for k, _ in pd.named_parameters()] == ["w", "v"] and pd["w"].requires_grad


def test_shared_module_counted_once():
    lin = nn.Linear(2, 2)
    seq = nn.Sequential(lin, nn.ReLU(), lin)
    assert len(list(seq.parameters())) == 2 and len(list(seq.modules())) == 3
    assert list(seq.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]


# ---------------------------------------------------------------- hooks
def test_forward_hooks_modify_input_and_output_and_are_removable():
    lin = nn.Linear(2, 1)
    x = tg.ones(3, 2)
    base = lin(x).detach().numpy()
    calls = []
    h1 = lin.register_forward_pre_hook(lambda m, args: (args[0] * 2,))
    h2 = lin.register_forward_hook(lambda m, args, out: out + 1)
    h3 = lin.register_forward_hook(lambda m, args, out: calls.append("first"), prepend=True)
    np.testing.assert_allclose(lin(x).detach().numpy(), lin.forward(x * 2).detach().numpy() + 1, rtol=1e-6)
    assert calls == ["first"]
    for h in (h1, h2, h3):
        h.remove()
    np.testing.assert_allclose(lin(x).detach().numpy(), base)
    with lin.register_forward_hook(lambda m, a, kw, out: out * kw.get("k", 1), with_kwargs=True):
        pass
    assert not lin._forward_hooks


def test_forward_hooks_inside_a_compiled_function_are_traced_and_guarded():
    lin = nn.Linear(2, 1)
    f = tg.compile(lambda x: lin(x))
    x = tg.ones(3, 2)
    base = f(x).detach().numpy()
    h = lin.register_forward_hook(lambda m, args, out: out * 3)
    np.testing.assert_allclose(f(x).detach().numpy(), base * 3, rtol=1e-6)
    h.remove()
    np.testing.assert_allclose(f(x).detach().numpy(), base, rtol=1e-6)
    assert f.stats()["traces"] == 3 and any("_forward_hooks" in r for r in f.stats()["retrace_reasons"])


def test_tensor_hooks_leaf_and_intermediate():
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    hx = x.register_hook(lambda g: g * 10)
    y = x * 2
    seen = []
    hy = y.register_hook(lambda g: seen.append(g.clone()) or g + 1)
    (y * y).sum().backward()
    # dL/dy = 2y = [4, 8, 12]; the hook makes it [5, 9, 13]; dL/dx = 2 * that, then times 10
    np.testing.assert_allclose(seen[0].numpy(), [4.0, 8.0, 12.0])
    np.testing.assert_allclose(x.grad.numpy(), [100.0, 180.0, 260.0])
    hx.remove()
    hy.remove()
    x.grad = None
    (x * 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0, 2.0])
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        tg.ones(2).register_hook(lambda g: g)


def test_tensor_hooks_and_compiled_functions():
    lin = nn.Linear(3, 1)
    f = tg.compile(lambda m, x: m(x).sum())
    with lin.weight.register_hook(lambda g: g * 0):
        f(lin, tg.ones(2, 3)).backward()                    # compiled forward, eager backward: the hook runs
    assert float(lin.weight.grad.abs().sum()) == 0.0 and float(lin.bias.grad) == 2.0
    x = tg.ones(3, requires_grad=True)
    y = tg.compile(lambda x: x * 2)(x)                       # a hook on a compiled function's result
    with y.register_hook(lambda g: g * 5):
        y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [10.0, 10.0, 10.0])

    @tg.compile
    def hooked(x):
        y = x * 2
        y.register_hook(lambda g: g)
        return y.sum()
    with pytest.raises(tg.TraceError, match="register_hook inside a compiled function"):
        hooked(tg.ones(2, requires_grad=True))
    opt = tg.optim.SGD(lin.parameters(), lr=0.1)

    @tg.compile
    def step(x):
        lin(x).sum().backward()
        opt.step()
    with lin.bias.register_hook(lambda g: g):
        with pytest.raises(RuntimeError, match="backward inside a compiled function while tensor hooks"):
            step(tg.ones(2, 3))


# ---------------------------------------------------------------- gradient clipping
# (norm_type, total norm, clipped grads) for max_norm 2.5, from torch 2.13
CLIP = [(2.0, 5.852349758148193, [1.281536340713501, -1.7087150812149048],
         [[0.4271787703037262, 0.8543575406074524], [-0.8543575406074524, 0.2135893851518631]]),
        (1.0, 12.5, [0.5999999046325684, -0.7999998927116394],
         [[0.19999997317790985, 0.3999999463558197], [-0.3999999463558197, 0.09999998658895493]]),
        (math.inf, 4.0, [1.8749996423721313, -2.499999523162842],
         [[0.6249998807907104, 1.249999761581421], [-1.249999761581421, 0.3124999403953552]]),
        (3.0, 4.764039993286133, [1.574293851852417, -2.0990583896636963],
         [[0.5247645974159241, 1.0495291948318481], [-1.0495291948318481, 0.26238229870796204]])]


def _params_with_grads():
    ps = [tg.tensor([3.0, -4.0], requires_grad=True), tg.tensor([[1.0, 2.0], [-2.0, 0.5]], requires_grad=True)]
    ps[0].grad, ps[1].grad = tg.tensor([3.0, -4.0]), tg.tensor([[1.0, 2.0], [-2.0, 0.5]])
    return ps


@pytest.mark.parametrize("norm_type,total,g0,g1", CLIP)
def test_clip_grad_norm_matches_torch(norm_type, total, g0, g1):
    ps = _params_with_grads()
    t = nn.utils.clip_grad_norm_(ps, 2.5, norm_type=norm_type)
    assert abs(float(t) - total) < 1e-5
    np.testing.assert_allclose(ps[0].grad.numpy(), g0, rtol=1e-6)
    np.testing.assert_allclose(ps[1].grad.numpy(), g1, rtol=1e-6)


def test_clip_grad_value_and_nonfinite():
    ps = _params_with_grads()
    nn.utils.clip_grad_value_(ps, 0.3)
    np.testing.assert_allclose(ps[1].grad.numpy(), [[0.3, 0.3], [-0.3, 0.3]], rtol=1e-6)
    ps[0].grad = tg.tensor([math.inf, 0.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_(ps, 1.0, error_if_nonfinite=True)
    assert float(nn.utils.clip_grad_norm_([tg.ones(1, requires_grad=True)], 1.0)) == 0.0


def test_clip_grad_norm_in_a_compiled_step_matches_eager():
    def run(compiled):
        tg.manual_seed(3)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
        opt = tg.optim.SGD(model.parameters(), lr=0.5)
        x, y = tg.randn(16, 4) * 5, tg.randn(16, 2)

        def step(x, y):
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            norm = nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            opt.step()
            return loss, norm
        f = tg.compile(step) if compiled else step
        out = [f(x, y) for _ in range(3)]
        return [float(v) for pair in out for v in pair], [p.detach().numpy() for p in model.parameters()]
    (e_vals, e_ps), (c_vals, c_ps) = run(False), run(True)
    np.testing.assert_allclose(c_vals, e_vals, rtol=1e-5)
    assert e_vals[1] > 0.1                                   # the clipping was active
    for a, b in zip(e_ps, c_ps):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_parameters_to_vector_round_trip():
    lin = nn.Linear(2, 3)
    v = nn.utils.parameters_to_vector(lin.parameters())
    assert v.shape == (9,)
    nn.utils.vector_to_parameters(tg.arange(9.0), lin.parameters())
    np.testing.assert_array_equal(lin.weight.detach().numpy(), np.arange(6.0).reshape(3, 2))
    np.testing.assert_array_equal(lin.bias.detach().numpy(), [6.0, 7.0, 8.0])


def test_hook_registries_empty_after_remove():
    from tracegrad import autograd
    x = tg.ones(2, requires_grad=True)
    seen = []
    h1 = x.register_hook(lambda g: g * 2)
    h2 = x.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.tolist()))
    (x * 3).sum().backward()
    assert seen == [[6.0, 6.0]]
    h1.remove()
    h2.remove()
    assert id(x) not in autograd.TENSOR_HOOKS and id(x) not in autograd._POST_ACCUMULATE   # fast paths back
    (x * 3).sum().backward()
    assert seen == [[6.0, 6.0]] and x.grad.tolist() == [9.0, 9.0]
