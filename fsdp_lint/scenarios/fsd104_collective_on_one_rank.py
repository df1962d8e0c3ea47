"""FSD104 scenario: a full state dict gathered on rank 0 only; the job hangs."""

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp_lint.scenarios import _harness


def main():
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    model = FSDP(_harness.mlp(), device_id=where)
    if dist.get_rank() == 0:
        state = model.state_dict()
        print(f"gathered {len(state)} tensors", flush=True)
    model(torch.randn(8, 64, device=where)).sum().backward()
    _harness.report(hazard=False, detail="the step after the save completed")
    _harness.finish()


if __name__ == "__main__":
    main()
