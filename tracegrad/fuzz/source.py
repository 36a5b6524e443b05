"""A generated program: its parts, and the Python module text written for it."""


class Program:
    """One generated program. `body` (statements), `returns` and `calls` are what shrinking removes."""

    def __init__(self, kind, index, seed, dtype, inputs, body, returns, run, header=(), params=None, calls=()):
        self.kind, self.index, self.seed, self.dtype, self.stream = kind, index, seed, dtype, None
        self.inputs, self.body, self.returns, self.run = inputs, list(body), list(returns), list(run)
        self.calls = list(calls)   # blocks of run() after `run`: each a call and what it records
        self.notes = []            # per call: what precedes it (a state change, an aliasing pattern)
        self.header = list(header)
        self.params = [n for n, _, _ in inputs] if params is None else params   # [] : no function f

    def replace(self, body=None, returns=None, calls=None):
        p = Program(self.kind, self.index, self.seed, self.dtype, self.inputs,
                    self.body if body is None else body, self.returns if returns is None else returns,
                    self.run, self.header, self.params, self.calls if calls is None else calls)
        p.stream, p.notes = self.stream, self.notes
        return p

    def source(self):
        ins = []
        for name, shape, o in self.inputs:
            if "labels" in o:
                ins.append(f"labels(rng, {shape[0]}, {o['labels']})")
            else:
                opts = "".join(f", {k}={v!r}" for k, v in o.items() if v not in (False, None))
                ins.append(f"data(rng, {shape!r}, dtype{opts})")
        body = "\n".join("    " + line.replace("\n", "\n    ") for line in self.body) or "    pass"
        ret = ", ".join(self.returns)
        lines = [f'"""tracegrad fuzz: program {self.index} of `--seed {self.stream}` ({self.kind}, {self.dtype}).',
                 "Run it: `python THIS_FILE.py` compares eager, interpret and llvm and prints the differences.",
                 f"Regenerate: python -m tracegrad fuzz --seed {self.stream} --start {self.index} --n 1 "
                 f"--kind {self.kind} --dtype {self.dtype}"
                 '"""',
                 "import numpy as np", "", "import tracegrad as tg",
                 "from tracegrad.fuzz.harness import Recorder, data, labels, main, set_lr  # noqa: F401", "",
                 f"DTYPE = {self.dtype!r}", "", *self.header, "",
                 "def inputs(dtype):",
                 f"    rng = np.random.default_rng({self.seed})",
                 "    return [" + (",\n            ".join(ins)) + "]", "", "",
                 *([f"def f({', '.join(self.params)}):", body, f"    return {ret or 'None'}", "", ""]
                   if self.params else []),
                 "def run(mode, dtype=DTYPE):",
                 f"    tg.manual_seed({self.seed % 2**31})",
                 "    rec = Recorder()",
                 *(("    " + line).rstrip() for line in self.run + "\n".join(self.calls).splitlines()),
                 "    return rec", "", "",
                 'if __name__ == "__main__":', "    main(run)", ""]
        return "\n".join(lines)
