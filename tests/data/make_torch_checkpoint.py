"""Writes torch_checkpoint.pt, the PyTorch-made file tests/test_serialization.py reads (run with torch
installed: python tests/data/make_torch_checkpoint.py). It prints the numbers the test checks."""
import pathlib

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
with torch.no_grad():
    model[0].weight.copy_(torch.tensor([[0.5, -0.25, 1.0], [2.0, 0.125, -1.5]]))
    model[0].bias.copy_(torch.tensor([0.1, -0.2]))
model.train()
model(torch.tensor([[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0]]))       # running stats and num_batches_tracked move
opt = torch.optim.Adam(model[0].parameters(), lr=0.1)
x, y = torch.tensor([[1.0, -1.0, 0.5]]), torch.tensor([[0.3, -0.7]])
((model[0](x) - y) ** 2).mean().backward()
opt.step()
grid = torch.arange(12, dtype=torch.float64).reshape(3, 4)
checkpoint = {
    "model": model.state_dict(),
    "optimizer": opt.state_dict(),
    "extras": {"half": torch.tensor([1.5, -2.0], dtype=torch.float16), "bf16": torch.tensor([3.0, 0.15625],
               dtype=torch.bfloat16), "flags": torch.tensor([True, False]), "ints": torch.tensor([7, -3], dtype=torch.int32),
               "column": grid[:, 1], "param": torch.nn.Parameter(torch.tensor([4.0])), "epoch": 3, "name": "run-1",
               "betas": (0.9, 0.999), "none": None},
}
path = pathlib.Path(__file__).with_name("torch_checkpoint.pt")
torch.save(checkpoint, path)
opt.zero_grad()
((model[0](x) - y) ** 2).mean().backward()
opt.step()
print("size", path.stat().st_size)
print("running_mean", model[1].running_mean.tolist(), "running_var", model[1].running_var.tolist())
print("weight after a second Adam step", model[0].weight.tolist(), "bias", model[0].bias.tolist())
