"""FSD007 scenario, generate form: a sampling method of the model (``FSDP.__getattr__`` hands
it to the inner module) called inside a recursive summon, with nested FSDP units and flat
parameters (use_orig_params=False)."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

from fsdp_lint.scenarios import _harness


class Block(torch.nn.Module):
    def __init__(self, width=64):
        super().__init__()
        self.linear = torch.nn.Linear(width, width)

    def forward(self, x):
        return torch.relu(self.linear(x))


class Sampler(torch.nn.Module):
    def __init__(self, width=64, depth=3):
        super().__init__()
        self.embed = torch.nn.Linear(width, width)
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(depth))

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return x

    def generate(self, x, steps=3):
        for _ in range(steps):
            x = self(x)
        return x


def main():
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    model = FSDP(Sampler(), auto_wrap_policy=ModuleWrapPolicy({Block}), device_id=where)
    batch = torch.randn(8, 64, device=where)
    model(batch).sum().backward()
    with torch.no_grad():
        with FSDP.summon_full_params(model, writeback=False):
            sample = model.generate(batch)
    model(batch).sum().backward()  # training goes on after the rollout
    _harness.report(hazard=False, detail=f"sample norm {float(sample.norm()):.4f}")
    _harness.finish()


if __name__ == "__main__":
    main()
