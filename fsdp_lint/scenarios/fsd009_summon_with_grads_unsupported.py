"""FSD009 scenario: with_grads=True on a model wrapped without use_orig_params=True."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp_lint.scenarios import _harness


def main():
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    model = FSDP(_harness.mlp(), device_id=where)
    model(torch.randn(8, 64, device=where)).sum().backward()
    with FSDP.summon_full_params(model, with_grads=True, writeback=False):
        count = sum(1 for p in model.parameters() if p.grad is not None)
    _harness.report(hazard=False, detail=f"{count} full gradients seen")
    _harness.finish()


if __name__ == "__main__":
    main()
