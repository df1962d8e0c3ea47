"""FSD004 scenario: rank0_only=True with the default writeback (NotImplementedError at entry)."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp_lint.scenarios import _harness


def main():
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    model = FSDP(_harness.mlp(), device_id=where)
    with FSDP.summon_full_params(model, rank0_only=True):
        total = sum(p.numel() for p in model.parameters())
    _harness.report(hazard=False, detail=f"rank {rank} saw {total} parameters")
    _harness.finish()


if __name__ == "__main__":
    main()
