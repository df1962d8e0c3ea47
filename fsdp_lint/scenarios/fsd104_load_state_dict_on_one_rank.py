"""FSD104 scenario (load): a full state dict loaded into the FSDP1 module on rank 0 only;
the load's pre-hook all-gathers the parameters and the job hangs."""

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp_lint.scenarios import _harness


def main():
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    model = FSDP(_harness.mlp(), device_id=where)
    state = model.state_dict()
    if dist.get_rank() == 0:
        model.load_state_dict(state)
        print(f"loaded {len(state)} tensors", flush=True)
    model(torch.randn(8, 64, device=where)).sum().backward()
    _harness.report(hazard=False, detail="the step after the load completed")
    _harness.finish()


if __name__ == "__main__":
    main()
