"""FSD010 scenario: offload_to_cpu=True on a NO_SHARD model (NotImplementedError at entry)."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy

from fsdp_lint.scenarios import _harness


def main():
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    model = FSDP(_harness.mlp(), device_id=where, sharding_strategy=ShardingStrategy.NO_SHARD)
    with FSDP.summon_full_params(model, offload_to_cpu=True, rank0_only=True, writeback=False):
        total = sum(p.numel() for p in model.parameters())
    _harness.report(hazard=False, detail=f"rank {rank} saw {total} parameters")
    _harness.finish()


if __name__ == "__main__":
    main()
