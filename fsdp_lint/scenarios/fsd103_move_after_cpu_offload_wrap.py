"""FSD103 scenario: .cuda() on a module wrapped with CPU parameter offload."""

import torch
from torch.distributed.fsdp import CPUOffload
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp_lint.scenarios import _harness


def main():
    rank, _, device, local_rank = _harness.init()
    model = FSDP(_harness.mlp(), cpu_offload=CPUOffload(offload_params=True))
    model = model.cuda()
    loss = model(torch.randn(8, 64, device="cuda")).sum()
    _harness.report(hazard=False, detail=f"loss {float(loss):.4f}")
    _harness.finish()


if __name__ == "__main__":
    main()
