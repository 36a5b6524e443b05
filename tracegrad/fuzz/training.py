"""Training-step programs: a model, an optimizer, a compiled step called several times with state
changes between calls (see programs.py)."""
from .source import Program

NET = '''class Net(tg.nn.Module):
    def __init__(self, i, h, o, p, norm):
        super().__init__()
        self.l0, self.l1, self.p = tg.nn.Linear(i, h), tg.nn.Linear(h, o), p
        self.norm = tg.nn.LayerNorm(h) if norm else None

    def forward(self, x):
        h = {act}(self.l0(x))
        if self.norm is not None:
            h = self.norm(h)
        h = tg.nn.functional.dropout(h, self.p, training=self.training)
        return self.l1(h)
'''

ACTS = ["tg.nn.functional.relu", "tg.tanh", "tg.nn.functional.gelu", "tg.nn.functional.sigmoid"]
OPTIMIZERS = ["tg.optim.SGD(model.parameters(), lr=0.1)", "tg.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)",
              "tg.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=0.01)",
              "tg.optim.Adam(model.parameters(), lr=0.01)",
              "tg.optim.Adam(model.parameters(), lr=0.02, betas=(0.8, 0.9))"]
# state changes between calls: each is a guard (retrace) or a runtime input for the compiled step
CHANGES = ["set_lr(opt, 0.0)", "set_lr(opt, 0.3)", "model.eval()", "model.train()",
           "model.l0.weight = tg.nn.Parameter(model.l0.weight.detach() * 0.5)",
           "model.l1 = tg.nn.Linear({h}, {o}).to(getattr(tg, dtype))",
           "with tg.no_grad():\n    model.l0.bias.fill_(0.1)", "model.p = 0.5", "model.p = 0.0",
           "opt.zero_grad()", "eval_call"]
# how the step reaches the model: closure, arguments, or parameters as arguments as well
STEPS = {
    "closure": ("def step(x, y):", "model(x)", "fn(*xs)"),
    "args": ("def step(model, opt, x, y):", "model(x)", "fn(model, opt, *xs)"),
    "params": ("def step(x, y, *ps):", "forward(ps, x)", "fn(*xs, *model.parameters())"),
    "outside": ("def step(x, y):", "model(x)", "train(*xs)"),
}
FORMS = {"closure": "step reads model and optimizer from its closure",
         "args": "model and optimizer passed as arguments",
         "params": "parameters passed as arguments and held by the optimizer",
         "outside": "only the loss compiled; backward() and the optimizer step outside it"}
NOTES = {"eval_call": "an eval call under no_grad", "model.l1 = tg.nn.Linear": "model.l1 replaced by a new Linear"}
FORWARD = ["def forward(ps, x):", "    w0, b0, w1, b1 = ps[:4]", "    return {act}(x @ w0.T + b0) @ w1.T + b1"]


def _train(rng, index, seed, dtype):
    pick = lambda seq: seq[int(rng.integers(len(seq)))]  # noqa: E731
    n, i, h, o = (int(pick(s)) for s in ([1, 2, 3, 17], [1, 2, 3, 17], [1, 3, 17], [1, 2, 3]))
    act = pick(ACTS)
    form = pick(list(STEPS))
    p, norm = (0.0 if form == "params" else float(pick([0.0, 0.0, 0.25]))), form != "params" and rng.random() < 0.3
    ce = rng.random() < 0.4
    inputs = [("x", (n, i), {}), ("y", (n,), {"labels": o}) if ce else ("y", (n, o), {})]
    header = NET.format(act=act).splitlines() + [""]
    if form == "params":
        header += [line.format(act=act) for line in FORWARD] + [""]
    sig, call_model, call = STEPS[form]
    loss = f"tg.nn.functional.{'cross_entropy' if ce else 'mse_loss'}({call_model}, y)"
    body = ["opt.zero_grad()", f"loss = {loss}", "loss.backward()", "opt.step()"]
    if rng.random() < 0.3:
        body[0:1] = []                         # gradients accumulate across calls
        body.append("opt.zero_grad()")
    outside = []
    if form == "outside":                      # the step around the compiled loss, the same in every mode
        outside = ["def train(*xs):", *("    " + line.replace(loss, "fn(*xs)") for line in body),
                   "    return loss", ""]
        body = [f"loss = {loss}"]
    run = ["model = Net(%d, %d, %d, %r, %r).to(getattr(tg, dtype))" % (i, h, o, p, norm),
           f"opt = {pick(OPTIMIZERS)}", "xs = inputs(dtype)",
           "", sig, *("    " + line for line in body), "    return loss", "",
           "fn = step if mode == 'eager' else tg.compile(step, backend=mode)",
           "evalfn = model if mode == 'eager' else tg.compile(lambda x: model(x), backend=mode)", "", *outside]
    calls, notes = [], []
    for k in range(int(rng.integers(2, 6))):
        block, change = [], ""
        if k and rng.random() < 0.6:
            change = pick(CHANGES).format(h=h, o=o)
            if change == "eval_call":
                block += ["with tg.no_grad():", f"    rec('call{k}.eval', evalfn(xs[0]))"]
            else:
                block += change.splitlines()
        block += [f"rec('call{k}.loss', {call})",
                  "for name, q in model.named_parameters():", f"    rec('call{k}.param.' + name, q)"]
        calls.append("\n".join(block))
        notes.append(NOTES.get(change.split("(")[0], change.replace("\n    ", ": ")) + f" ({FORMS[form]})"
                     if change else f"({FORMS[form]})")
    program = Program("train", index, seed, dtype, inputs, [], [], run, header, params=[], calls=calls)
    program.notes = notes
    return program
