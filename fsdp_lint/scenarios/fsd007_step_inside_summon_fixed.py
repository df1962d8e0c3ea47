"""FSD007 scenario, fixed by hand: the step runs outside the summon block."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp_lint.scenarios import _harness


def main():
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    model = FSDP(_harness.mlp(), device_id=where)
    batch = torch.randn(8, 64, device=where)
    loss = model(batch).sum()
    loss.backward()
    with FSDP.summon_full_params(model):
        norm = float(sum(p.norm() for p in model.parameters()))
    _harness.report(hazard=False, detail=f"loss {float(loss):.4f}, norm {norm:.4f}")
    _harness.finish()


if __name__ == "__main__":
    main()
