"""FSD101 scenario, fixed by hand: the optimizer is built after wrapping."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp_lint.scenarios import _harness


def full_weights(model):
    with FSDP.summon_full_params(model, writeback=False):
        return [p.detach().clone() for p in model.parameters()]


def main():
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    model = _harness.mlp().to(where)
    model = FSDP(model, device_id=where)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = full_weights(model)
    for _ in range(3):
        model(torch.randn(8, 64, device=where)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    after = full_weights(model)
    changed = sum(int(not torch.equal(a, b)) for a, b in zip(after, before))
    _harness.report(hazard=changed == 0, detail=f"{changed}/{len(before)} parameters changed by 3 optimizer steps")
    _harness.finish()


if __name__ == "__main__":
    main()
