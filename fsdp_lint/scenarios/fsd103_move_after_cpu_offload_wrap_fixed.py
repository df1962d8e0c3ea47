"""FSD103 scenario, fixed by hand: FSDP places the parameters itself (device_id), no move."""

import torch
from torch.distributed.fsdp import CPUOffload
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp_lint.scenarios import _harness


def main():
    rank, _, device, local_rank = _harness.init()
    model = FSDP(_harness.mlp(), cpu_offload=CPUOffload(offload_params=True), device_id=local_rank)
    loss = model(torch.randn(8, 64, device="cuda")).sum()
    _harness.report(hazard=False, detail=f"loss {float(loss):.4f}")
    _harness.finish()


if __name__ == "__main__":
    main()
