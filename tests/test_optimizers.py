"""Optimizers against torch 2.13: parameters after 5 steps on a small fixed least-squares problem in
float64 (literals computed with torch.optim), state_dict round trips, param_groups, closures."""
import numpy as np
import pytest

import tracegrad as tg

W0 = np.array([[0.5, -0.3, 0.8], [0.1, 0.4, -0.6]])
B0 = np.array([0.05, -0.02])
X = np.array([[1.0, 2.0, -1.0], [0.5, -1.5, 2.0], [-0.3, 0.7, 0.2], [1.2, -0.4, -0.9]])
Y = np.array([[0.3, -0.2], [1.0, 0.5], [-0.7, 0.1], [0.2, 0.9]])
CONFIGS = {
    "sgd_nesterov": ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    "sgd_dampening": ("SGD", dict(lr=0.1, momentum=0.8, dampening=0.3)),
    "sgd_plain_max": ("SGD", dict(lr=0.05, maximize=True)),
    "adam_amsgrad": ("Adam", dict(lr=0.05, amsgrad=True, weight_decay=0.1)),
    "adamw": ("AdamW", dict(lr=0.05, betas=(0.8, 0.95), weight_decay=0.1)),
    "adamw_amsgrad": ("AdamW", dict(lr=0.05, amsgrad=True)),
    "rmsprop": ("RMSprop", dict(lr=0.01)),
    "rmsprop_centered_mom": ("RMSprop", dict(lr=0.01, alpha=0.9, momentum=0.5, centered=True, weight_decay=0.05)),
    "adagrad": ("Adagrad", dict(lr=0.1, lr_decay=0.05, weight_decay=0.02, initial_accumulator_value=0.1)),
}
# w.ravel() then b after 5 steps of each config, from torch 2.13
TORCH = {
    "sgd_nesterov": [ 0.6481326728602833 ,  0.1330085939854395 ,  0.22387120102212146,  0.24260905297120408, -0.5459320751799099 ,  0.09593425961279434, -0.1978646207300035 ,  0.32071504652901567],
    "sgd_dampening": [ 0.6222021804673269 ,  0.19393644181085956,  0.23715938864778374,  0.15551119828163115, -0.5443671975840682 ,  0.16056881802034823, -0.09421388382712848,  0.19768464886770465],
    "sgd_plain_max": [ 0.43467258631899675, -0.6237368299667106 ,  1.1320216359393562 ,  0.11820092195685734,  0.9652968359809835 , -1.0828645651436872 ,  0.0842274338371043 , -0.08140492589592684],
    "adam_amsgrad": [ 0.7362291845346738 , -0.05742390117975402,  0.5568285105918327 ,  0.0378829942419387 ,  0.15277341088099888, -0.35363582823098333, -0.19437494297280017,  0.22196852264524294],
    "adamw": [ 0.7275439786023704 , -0.05562849536326213,  0.5432602388209089 ,  0.03634785153883058,  0.14668016284044408, -0.3429731306950507 , -0.19287174245279784,  0.2172378092127945 ],
    "adamw_amsgrad": [ 0.7426916573630173 , -0.05691548594427759,  0.5556870890950046 ,  0.03498776924232106,  0.1519569385744938 , -0.3523532486185891 , -0.19627945296407479,  0.22191018753899933],
    "rmsprop": [ 0.7678565519312106 , -0.04623279129005227,  0.5470490187404211 ,  0.04009463316214576,  0.10952500312053484, -0.3183180755257379 , -0.22824123385001915,  0.23217344568538753],
    "rmsprop_centered_mom": [ 0.6824515673811732 , -0.11564101597004883,  0.6151219480611828 ,  0.03855284915836955,  0.20594546359177104, -0.4082250051316539 , -0.13945203919883342,  0.1649197689775291 ],
    "adagrad": [ 0.6504306663150181 , -0.06636385021420073,  0.5602405776322609 ,  0.0924873184895725 ,  0.1309383447049355 , -0.33753064938300903, -0.10986424194896843,  0.16019630183686953],
}


def _setup(name):
    kind, kw = CONFIGS[name]
    w, b = tg.tensor(W0.copy(), requires_grad=True), tg.tensor(B0.copy(), requires_grad=True)
    return w, b, getattr(tg.optim, kind)([w, b], **kw)


def _steps(w, b, opt, n):
    x, y = tg.tensor(X), tg.tensor(Y)
    for _ in range(n):
        opt.zero_grad()
        (((x @ w.T + b) - y) ** 2).mean().backward()
        opt.step()
    return np.concatenate([w.detach().numpy().ravel(), b.detach().numpy().ravel()])


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_trajectory_matches_torch(name):
    np.testing.assert_allclose(_steps(*_setup(name), 5), np.array(TORCH[name]), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_state_dict_round_trip_resumes_exactly(name):
    w, b, opt = _setup(name)
    _steps(w, b, opt, 2)
    saved = opt.state_dict()
    saved = {"state": {k: {n: v.clone() if isinstance(v, tg.Tensor) else v for n, v in st.items()}
                       for k, st in saved["state"].items()},
             "param_groups": [dict(g) for g in saved["param_groups"]]}
    w2, b2, opt2 = _setup(name)
    with tg.no_grad():
        w2.copy_(w)
        b2.copy_(b)
    for g in opt2.param_groups:
        g["lr"] = 123.0                  # overwritten by the load
    held = {k: v for k, v in opt2.state[w2].items()}
    opt2.load_state_dict(saved)
    assert all(opt2.state[w2][k] is v for k, v in held.items())     # copied into its own buffers
    np.testing.assert_array_equal(_steps(w2, b2, opt2, 3), _steps(w, b, opt, 3))


def test_state_dict_layout_is_torchs():
    w, b, opt = _setup("adamw")
    _steps(w, b, opt, 1)
    sd = opt.state_dict()
    assert sorted(sd) == ["param_groups", "state"] and sorted(sd["state"]) == [0, 1]
    assert sorted(sd["state"][0]) == ["exp_avg", "exp_avg_sq", "step"] and float(sd["state"][0]["step"]) == 1
    g = sd["param_groups"][0]
    assert g["params"] == [0, 1] and g["lr"] == 0.05 and g["betas"] == (0.8, 0.95) and g["weight_decay"] == 0.1
    assert opt.state[w] is not None and opt.state[w]["exp_avg"] is sd["state"][0]["exp_avg"]


def test_load_state_dict_checks_groups():
    w, b, opt = _setup("adamw")
    with pytest.raises(ValueError, match="different number of parameter groups"):
        opt.load_state_dict({"state": {}, "param_groups": []})
    with pytest.raises(ValueError, match="doesn't match the size"):
        opt.load_state_dict({"state": {}, "param_groups": [{"params": [0]}]})


def test_param_groups_hyperparameters_and_closure():
    a, b = tg.ones(2, requires_grad=True), tg.ones(2, requires_grad=True)
    opt = tg.optim.SGD([{"params": [a]}, {"params": b, "lr": 0.5}], lr=0.1, momentum=0.9)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5] and opt.param_groups[1]["momentum"] == 0.9
    assert opt.param_groups[1]["nesterov"] is False and opt.param_groups[1]["dampening"] == 0.0

    def closure():
        opt.zero_grad()
        loss = (a * 2 + b * 3).sum()
        loss.backward()
        return loss
    assert float(opt.step(closure)) == 10.0
    np.testing.assert_allclose(a.detach().numpy(), [0.8, 0.8])
    np.testing.assert_allclose(b.detach().numpy(), [-0.5, -0.5])


@pytest.mark.parametrize("make,match", [
    (lambda p: tg.optim.SGD(p, lr=0.1, nesterov=True), "Nesterov momentum requires"),
    (lambda p: tg.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1, nesterov=True), "Nesterov momentum requires"),
    (lambda p: tg.optim.AdamW(p, betas=(1.0, 0.9)), "invalid"),
    (lambda p: tg.optim.RMSprop(p, alpha=-1), ">= 0"),
    (lambda p: tg.optim.Adagrad(p, lr_decay=-1), ">= 0"),
])
def test_invalid_hyperparameters(make, match):
    with pytest.raises(ValueError, match=match):
        make([tg.ones(2, requires_grad=True)])


def test_momentum_turned_on_later_makes_its_buffer():
    p = tg.ones(2, requires_grad=True)
    opt = tg.optim.SGD([p], lr=0.1)
    assert "momentum_buffer" not in opt.state[p]
    opt.param_groups[0]["momentum"] = 0.5
    for _ in range(2):
        opt.zero_grad()
        (p * p).sum().backward()
        opt.step()
    # torch: p1 = 1 - 0.1 * 2 = 0.8; buf = 0.5 * 2 + 1.6 = 2.6; p2 = 0.8 - 0.26
    np.testing.assert_allclose(p.detach().numpy(), [0.54, 0.54], rtol=1e-6)


def test_repr_lists_groups_as_torch():
    opt = tg.optim.SGD([tg.ones(1, requires_grad=True)], lr=0.1, momentum=0.9)
    assert repr(opt) == ("SGD (\nParameter Group 0\n    dampening: 0.0\n    differentiable: False\n    foreach: None\n"
                         "    fused: None\n    lr: 0.1\n    maximize: False\n    momentum: 0.9\n    nesterov: False\n"
                         "    weight_decay: 0.0\n)")


def test_torch_implementation_flags_are_accepted():
    p = [tg.ones(2, requires_grad=True)]
    g = tg.optim.AdamW(p, lr=0.1, fused=True).param_groups[0]
    assert g["fused"] is True and g["foreach"] is None and g["differentiable"] is False
    assert tg.optim.SGD(p, lr=0.1, foreach=False, capturable=True).param_groups[0]["capturable"] is True
    with pytest.raises(NotImplementedError, match="differentiable=True"):
        tg.optim.RMSprop(p, differentiable=True)
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['foo'\\]"):
        tg.optim.Adagrad(p, foo=1)
