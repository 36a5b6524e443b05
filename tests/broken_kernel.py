"""A test helper for check mode: make a compiled program's last captured kernel output wrong."""


def break_last_kernel(monkeypatch, prog):
    """Patch `prog.run` so that, run kernel by kernel (check mode), the last kernel output it
    captures is off by one: check=True must report it."""
    real_run = prog.run

    def broken(arrays, timings=None, capture=None, sizes=None):
        outs = real_run(arrays, timings=timings, capture=capture, sizes=sizes)
        for vid in list(capture)[-1:]:
            capture[vid] = capture[vid] + 1.0
        return outs
    monkeypatch.setattr(prog, "run", broken)
