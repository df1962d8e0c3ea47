"""FSD105 scenario, method form: a method of the model's own class (not ``forward``, not a
library entry point) called on an FSDP1 root after a training step; it computes with the
root's own weights (an input layer and a head no nested unit owns)."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

from fsdp_lint.scenarios import _harness
from fsdp_lint.scenarios.fsd105_generate_outside_summon import Block  # the nested units


class FlowModel(torch.nn.Module):
    """Points in through a linear layer, blocks wrapped as their own FSDP units, a velocity head
    at the root."""

    def __init__(self, width=16, depth=2):
        super().__init__()
        self.point_in = torch.nn.Linear(3, width)
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(depth))
        self.velocity = torch.nn.Linear(width, 3)

    def forward_train(self, points):
        hidden = self.point_in(points)
        for block in self.blocks:
            hidden = block(hidden)
        return self.velocity(hidden)

    def forward(self, points):
        return self.forward_train(points)


def main():
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    model = FSDP(FlowModel(), auto_wrap_policy=ModuleWrapPolicy({Block}), device_id=where)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    points = torch.randn(4, 8, 3, device=where)
    model(points).pow(2).mean().backward()
    optimizer.step()
    velocity = model.forward_train(points)
    agree = _harness.gather(float(velocity.sum()))
    _harness.report(hazard=False, detail=f"velocity {tuple(velocity.shape)}; ranks agree: {len(set(agree)) == 1}")
    _harness.finish()


if __name__ == "__main__":
    main()
