"""Learning-rate schedules against torch 2.13's sequences (written in as literals), and a compiled
training step under a schedule: one trace while lr (and momentum) change, values equal to eager."""
import numpy as np
import pytest

import tracegrad as tg

L = tg.optim.lr_scheduler

# (lr, momentum or beta1) before each of 12 steps, from torch 2.13 (opt.step(); sched.step() per step)
TORCH = {
    "step": [(0.1, 0), (0.1, 0), (0.1, 0), (0.05, 0), (0.05, 0), (0.05, 0), (0.025, 0), (0.025, 0), (0.025, 0), (0.0125, 0), (0.0125, 0), (0.0125, 0)],
    "multistep": [(0.1, 0), (0.1, 0), (0.03, 0), (0.03, 0), (0.03, 0), (0.0026999999999999997, 0), (0.0026999999999999997, 0), (0.0026999999999999997, 0), (0.0026999999999999997, 0), (0.0008099999999999998, 0), (0.0008099999999999998, 0), (0.0008099999999999998, 0)],
    "exponential": [(0.1, 0), (0.09000000000000001, 0), (0.08100000000000002, 0), (0.07290000000000002, 0), (0.06561000000000002, 0), (0.05904900000000002, 0), (0.05314410000000002, 0), (0.04782969000000002, 0), (0.043046721000000024, 0), (0.03874204890000002, 0), (0.03486784401000002, 0), (0.03138105960900001, 0)],
    "cosine": [(0.1, 0), (0.09140576474687263, 0), (0.06890576474687263, 0), (0.04109423525312736, 0), (0.018594235253127367, 0), (0.01, 0), (0.018594235253127367, 0), (0.04109423525312739, 0), (0.06890576474687267, 0), (0.09140576474687269, 0), (0.10000000000000006, 0), (0.09140576474687272, 0)],
    "lambda": [(0.1, 0), (0.07071067811865475, 0), (0.05773502691896259, 0), (0.05, 0), (0.044721359549995794, 0), (0.04082482904638631, 0), (0.03779644730092272, 0), (0.035355339059327376, 0), (0.03333333333333333, 0), (0.0316227766016838, 0), (0.030151134457776365, 0), (0.028867513459481294, 0)],
    "linear": [(0.025, 0), (0.043750000000000004, 0), (0.06250000000000001, 0), (0.08125000000000002, 0), (0.10000000000000002, 0), (0.10000000000000002, 0), (0.10000000000000002, 0), (0.10000000000000002, 0), (0.10000000000000002, 0), (0.10000000000000002, 0), (0.10000000000000002, 0), (0.10000000000000002, 0)],
    "onecycle_sgd": [(0.040000000000000036, 0.95), (0.3497896542195831, 0.9177302443521267), (0.8792851591221287, 0.8625744625914449), (0.9944154354509117, 0.8505584586887436), (0.9330129698414117, 0.856698729810778), (0.811745653949763, 0.8688255099070633), (0.6473789976951033, 0.8852622412794547), (0.46263710266697505, 0.9037365046793212), (0.28306099820869923, 0.9216941869558779), (0.1334775301888306, 0.9366525935914912), (0.03456698742539522, 0.9465436874322102), (4e-06, 0.95)],
    "onecycle_adam_linear3": [(0.02, 0.95), (0.20461538461538464, 0.9115384615384615), (0.3892307692307693, 0.8730769230769231), (0.4261538461538461, 0.8653846153846154), (0.24153846153846148, 0.9038461538461539), (0.0569230769230768, 0.9423076923076923), (0.01724165517241379, 0.95), (0.013793724137931033, 0.95), (0.010345793103448273, 0.95), (0.006897862068965515, 0.95), (0.0034499310344827568, 0.95), (1.9999999999985307e-06, 0.95)],
    "plateau": [(0.1, 0), (0.1, 0), (0.1, 0), (0.1, 0), (0.05, 0), (0.05, 0), (0.05, 0), (0.05, 0), (0.05, 0), (0.025, 0), (0.025, 0), (0.025, 0)],
    "sequential": [(0.010000000000000002, 0), (0.04, 0), (0.07, 0), (0.1, 0), (0.1, 0), (0.09330127018922195, 0), (0.07500000000000001, 0), (0.05, 0), (0.025000000000000012, 0), (0.006698729810778065, 0), (0.0, 0), (0.006698729810778065, 0)],
    "chained": [(0.1, 0), (0.09000000000000001, 0), (0.08100000000000002, 0), (0.03645000000000001, 0), (0.03280500000000001, 0), (0.02952450000000001, 0), (0.02657205000000001, 0), (0.011957422500000005, 0), (0.010761680250000006, 0), (0.009685512225000005, 0), (0.008716961002500004, 0), (0.007845264902250003, 0)],
}
METRICS = [1.0, 0.9, 0.95, 0.91, 0.92, 0.93, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
CASES = {
    "step": (lambda o: L.StepLR(o, 3, 0.5), "SGD", {}),
    "multistep": (lambda o: L.MultiStepLR(o, [2, 5, 5, 9], 0.3), "SGD", {}),
    "exponential": (lambda o: L.ExponentialLR(o, 0.9), "SGD", {}),
    "cosine": (lambda o: L.CosineAnnealingLR(o, T_max=5, eta_min=0.01), "SGD", {}),
    "lambda": (lambda o: L.LambdaLR(o, lambda e: 1.0 / (1 + e) ** 0.5), "SGD", {}),
    "linear": (lambda o: L.LinearLR(o, start_factor=0.25, total_iters=4), "SGD", {}),
    "onecycle_sgd": (lambda o: L.OneCycleLR(o, max_lr=1.0, total_steps=12), "SGD", {"momentum": 0.9}),
    "onecycle_adam_linear3": (lambda o: L.OneCycleLR(o, max_lr=0.5, total_steps=12, anneal_strategy="linear",
                                                     three_phase=True), "Adam", {}),
    "plateau": (lambda o: L.ReduceLROnPlateau(o, patience=1, factor=0.5, cooldown=1, min_lr=0.02), "SGD", {}),
    "sequential": (lambda o: L.SequentialLR(o, [L.LinearLR(o, 0.1, total_iters=3), L.CosineAnnealingLR(o, T_max=6)],
                                            milestones=[4]), "SGD", {}),
    "chained": (lambda o: L.ChainedScheduler([L.ExponentialLR(o, 0.9), L.MultiStepLR(o, [3, 7], 0.5)]), "SGD", {}),
}


def _sequence(name):
    make, kind, kw = CASES[name]
    p = tg.zeros(2, requires_grad=True)
    opt = getattr(tg.optim, kind)([p], lr=0.1, **kw)
    sched = make(opt)
    out = []
    for i in range(12):
        g = opt.param_groups[0]
        out.append((g["lr"], g.get("momentum", g.get("betas", (None,))[0])))
        opt.step()
        sched.step(METRICS[i]) if name == "plateau" else sched.step()
    return out, sched


@pytest.mark.parametrize("name", sorted(CASES))
def test_schedule_matches_torch(name):
    got, sched = _sequence(name)
    np.testing.assert_allclose(np.array(got, float), np.array(TORCH[name], float), rtol=1e-12, atol=0)
    assert sched.get_last_lr() == [g["lr"] for g in sched.optimizer.param_groups]


def test_scheduler_state_dict_resumes():
    p = tg.zeros(2, requires_grad=True)
    opt = tg.optim.SGD([p], lr=0.1)
    s = L.StepLR(opt, 3, 0.5)
    for _ in range(4):
        s.step()
    saved = s.state_dict()
    assert "optimizer" not in saved and saved["last_epoch"] == 4
    opt2 = tg.optim.SGD([tg.zeros(2, requires_grad=True)], lr=0.1)
    s2 = L.StepLR(opt2, 3, 0.5)
    s2.load_state_dict(saved)
    assert s2.last_epoch == 4 and s2.get_last_lr() == s.get_last_lr()


def test_schedule_errors():
    opt = tg.optim.RMSprop([tg.zeros(2, requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match="total_steps"):
        L.OneCycleLR(opt, max_lr=1.0)
    with pytest.raises(TypeError, match="not an Optimizer"):
        L.StepLR(object(), 2)
    with pytest.raises(ValueError, match="Factor should be < 1.0"):
        L.ReduceLROnPlateau(opt, factor=1.5)
    s = L.OneCycleLR(opt, max_lr=1.0, total_steps=2)
    s.step()
    with pytest.raises(ValueError, match="Tried to step 3 times"):
        s.step(), s.step()


def _train(kind, make_sched, compiled, steps=8, **kw):
    rng = np.random.default_rng(0)
    w = tg.tensor(rng.standard_normal((3, 4)).astype(np.float32), requires_grad=True)
    b = tg.zeros(3, requires_grad=True)
    x, y = tg.tensor(rng.standard_normal((16, 4)).astype(np.float32)), tg.tensor(rng.standard_normal((16, 3)).astype(np.float32))
    opt = getattr(tg.optim, kind)([w, b], lr=0.05, **kw)
    sched = make_sched(opt)

    def step(x, y):
        loss = ((x @ w.T + b - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()              # every call starts with no .grad: one signature
        return loss
    run = tg.compile(step) if compiled else step
    losses, traces = [], []
    for _ in range(steps):
        losses.append(float(run(x, y)))
        sched.step()
        if compiled:
            traces.append(run.stats()["traces"])
    return np.array(losses), w.detach().numpy(), b.detach().numpy(), traces, opt


@pytest.mark.parametrize("kind,make,kw", [
    ("SGD", lambda o: L.OneCycleLR(o, max_lr=0.2, total_steps=10), {"momentum": 0.9, "nesterov": True}),
    ("AdamW", lambda o: L.OneCycleLR(o, max_lr=0.1, total_steps=10), {}),
    ("RMSprop", lambda o: L.CosineAnnealingLR(o, T_max=4), {"momentum": 0.5, "centered": True}),
    ("Adagrad", lambda o: L.ExponentialLR(o, 0.8), {"lr_decay": 0.1}),
    ("Adam", lambda o: L.LambdaLR(o, lambda e: 1 + e), {"amsgrad": True}),
    ("SGD", lambda o: L.MultiStepLR(o, [2, 5]), {"momentum": 0.8, "dampening": 0.3, "weight_decay": 0.01}),
])
def test_scheduled_compiled_step_never_retraces_and_matches_eager(kind, make, kw):
    eager = _train(kind, make, False, **kw)
    comp = _train(kind, make, True, **kw)
    assert comp[3] == [1] * len(comp[3])         # lr (and momentum, beta1) change at every call: no retrace
    for a, b in zip(eager[:3], comp[:3]):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-6)


def test_composite_scheduler_state_dict_resumes():
    def make():
        o = tg.optim.SGD([tg.zeros(2, requires_grad=True)], lr=0.1)
        return o, L.SequentialLR(o, [L.LinearLR(o, 0.1, total_iters=3), L.CosineAnnealingLR(o, T_max=6)], [4])
    o1, s1 = make()
    for _ in range(5):
        s1.step()
    saved = s1.state_dict()
    assert len(saved["_schedulers"]) == 2 and "optimizer" not in saved["_schedulers"][1]
    o2, s2 = make()
    s2.load_state_dict(saved)
    o2.param_groups[0]["lr"] = o1.param_groups[0]["lr"]
    for _ in range(4):
        s1.step()
        s2.step()
        assert o1.param_groups[0]["lr"] == o2.param_groups[0]["lr"]
