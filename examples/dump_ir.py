"""Print the forward and backward IR of a small MLP loss, to follow reverse mode line by line.

    python examples/dump_ir.py

The forward graph returns the loss and, after it, the values the backward graph needs (the
"saved" values s0, s1, ...); the backward graph takes the loss's cotangent g0 and those saved
values and returns one gradient per parameter, already summed back to the parameter's shape.
"""
import numpy as np

import tracegrad as tg
import tracegrad.nn.functional as F


def main():
    tg.manual_seed(0)
    x = tg.randn(4, 3)
    y = tg.tensor(np.array([0, 1, 1, 0]))
    w1 = tg.randn(3, 5, requires_grad=True)
    b1 = tg.zeros(5, requires_grad=True)
    w2 = tg.randn(5, 2, requires_grad=True)

    @tg.compile
    def mlp_loss(x, y, w1, b1, w2):
        h = (x @ w1 + b1).relu()
        return F.cross_entropy(h @ w2, y)

    for stage in ("forward", "backward", "kernels"):
        print(f"# ---- {stage}")
        print(mlp_loss.ir(x, y, w1, b1, w2, stage=stage, source=stage != "kernels"))
        print()
    loss = mlp_loss(x, y, w1, b1, w2)
    loss.backward()
    print("loss", float(loss), "| grad of b1:", b1.grad)


if __name__ == "__main__":
    main()
