"""FSD008 scenario, fixed by hand: the summon runs after the forward, not in a hook."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp_lint.scenarios import _harness


def log_norms(model):
    with FSDP.summon_full_params(model, writeback=False):
        return float(sum(p.norm() for p in model.parameters()))


def main():
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    model = FSDP(_harness.mlp(), device_id=where)
    loss = model(torch.randn(8, 64, device=where)).sum()
    norm = log_norms(model)
    _harness.report(hazard=False, detail=f"loss {float(loss):.4f}, norm {norm:.4f}")
    _harness.finish()


if __name__ == "__main__":
    main()
