"""FSD102 scenario: torch.nn.utils.clip_grad_norm_ over a sharded FSDP1 model's parameters."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp_lint.scenarios import _harness


def main():
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    model = FSDP(_harness.mlp(), device_id=where)
    model(torch.randn(8, 64, device=where)).square().sum().backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    norms = _harness.gather(norm)
    _harness.report(
        hazard=max(norms) - min(norms) > 1e-4 * max(norms),
        detail="gradient norms per rank: " + ", ".join(f"{n:.4f}" for n in norms),
    )
    _harness.finish()


if __name__ == "__main__":
    main()
