"""FSD106 scenario, format form: an FSDP2 model's total gradient norm logged with a format spec."""

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from fsdp_lint.scenarios import _harness


def main():
    rank, _, device, local_rank = _harness.init()
    model = _harness.mlp()
    if device == "cuda":
        model = model.cuda(local_rank)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    where = next(model.parameters()).device
    torch.manual_seed(1 + dist.get_rank())
    model(torch.randn(8, 64, device=where)).square().sum().backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e6)
    line = f"step 1 grad_norm {grad_norm:.4f}"
    print(line, flush=True)
    _harness.report(hazard=False, detail=f"logged '{line}'")
    _harness.finish()


if __name__ == "__main__":
    main()
