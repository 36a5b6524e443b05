"""The `reads` kind: a function that reads Python values through every kind of holder — globals read
by a helper and by a helper's helper, a module's forward reading attributes of every kind (a
function, a list, a dict, a module held in a plain list, a nested module, a config object), a
SimpleNamespace and a dataclass config, a closure cell of a helper, a NumPy array read as a Python
number, a float argument that may be -0.0 or NaN — changed between calls. Compiled calls must
retrace (or read them at each call) and agree with eager after every change."""
from .source import Program

HEADER = '''import dataclasses
import math
import types


@dataclasses.dataclass
class Conf:
    beta: float = 0.75


class Neg(tg.nn.Module):
    def forward(self, t):
        return -t


class Inner(tg.nn.Module):
    def __init__(self):
        super().__init__()
        self.shift = 0.25

    def forward(self, t):
        return t + self.shift


class Block(tg.nn.Module):
    def __init__(self):
        super().__init__()
        self.act, self.scale, self.table = tg.tanh, [1.5], {"shift": 0.5}
        self.subs, self.inner, self.cfg = [tg.nn.Identity()], Inner(), CFG

    def forward(self, t):
        t = self.subs[0](self.act(t) * self.scale[0] + self.table["shift"])
        return self.inner(t) * self.cfg.alpha * K


def make_gain(g):
    def gain(t):
        return t * g

    def set_gain(v):
        nonlocal g
        g = v
    return gain, set_gain


def scaled(t):
    return ACT(t * K) + float(ARR.sum()) * 0.1


def helper(t):
    return scaled(t) * TABLE["w"]


def setg(name, value):
    globals()[name] = value


def reset():
    """The globals as the program starts (each mode's run begins here)."""
    global K, ACT, TABLE, CFG, DC, ARR, BLOCK, GAIN, SET_GAIN
    K, ACT, TABLE, ARR = 0.5, tg.tanh, {"w": 1.25}, np.array([1.0, 2.0])
    CFG, DC = types.SimpleNamespace(alpha=1.5, act=tg.tanh), Conf()
    BLOCK = Block()
    GAIN, SET_GAIN = make_gain(1.25)
'''.splitlines()

USES = ["helper({x})", "BLOCK({x})", "GAIN({x}) * DC.beta", "CFG.act({x}) * CFG.alpha", "math.copysign(1.0, s) * {x}",
        "{x} * s"]

CHANGES = ["setg('K', -1.5)", "setg('K', 2.0)", "setg('ACT', tg.relu)", "setg('ACT', tg.sigmoid)",
           "TABLE['w'] = -0.5", "setg('TABLE', {'w': 3.0})", "ARR[0] = 5.0", "setg('ARR', np.array([0.5, 0.5]))",
           "BLOCK.act = tg.relu", "BLOCK.scale[0] = -2.0", "BLOCK.table['shift'] = 3.0", "BLOCK.scale = [0.5]",
           "BLOCK.subs[0] = Neg()", "BLOCK.subs.append(Neg())", "BLOCK.inner.shift = -1.0", "BLOCK.inner = Neg()",
           "CFG.alpha = -0.5", "CFG.act = tg.relu", "DC.beta = 2.5", "setg('DC', Conf(beta=-1.0))",
           "SET_GAIN(-3.0)", "s = -0.0", "s = float('nan')", "s = 0.0", "s = 3.0"]


def reads_program(b, rng, index, seed, dtype):
    """A program of the `reads` kind on the builder `b` (its first input is the value read)."""
    x = b.pool[0]
    uses = [USES[int(i)] for i in sorted(set(rng.integers(0, len(USES), int(rng.integers(2, 5)))))]
    for k, use in enumerate(uses):
        b.lines.append(f"r{k} = " + use.format(x=x.name))
        b.pool.append(type(x)(f"r{k}", x.shape))
    total = type(x)(f"v{len(b.lines)}", x.shape)
    b.lines.append(f"{total.name} = " + " + ".join(f"r{k}" for k in range(len(uses))))
    b.pool.append(total)
    for _ in range(int(rng.integers(0, 3))):
        b.step()
    calls, notes = [], []
    for k in range(int(rng.integers(2, 6))):
        change = CHANGES[int(rng.integers(len(CHANGES)))] if k else ""
        calls.append((change + "\n" if change else "") +
                     f"rec.grads(rec.outputs(fn(*xs, s), 'call{k}.out'), xs, 'call{k}.grad')")
        notes.append(f"after {change}" if change else "first call")
    run = ["xs = inputs(dtype)", "reset()", "s = 0.0",
           "fn = f if mode == 'eager' else tg.compile(f, backend=mode)"]
    returns = sorted({total.name, b.pool[-1].name}, key=lambda n: int(n[1:]))
    program = Program("reads", index, seed, dtype, b.inputs, b.lines, returns, run, HEADER, calls=calls,
                      params=[n for n, _, _ in b.inputs] + ["s"])
    program.notes = notes
    return program
