"""FSD006 scenario: offload_to_cpu=True without rank0_only=True (PyTorch warns of CPU OOM)."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp_lint.scenarios import _harness


def main():
    rank, _, device, local_rank = _harness.init()
    model = FSDP(_harness.mlp(), device_id=torch.device("cuda", local_rank))
    with FSDP.summon_full_params(model, offload_to_cpu=True, writeback=False):
        on_cpu = sum(p.numel() for p in model.parameters() if p.device.type == "cpu")
    _harness.report(hazard=False, detail=f"rank {rank} held {on_cpu} parameter elements in host memory")
    _harness.finish()


if __name__ == "__main__":
    main()
