"""FSD007 scenario: forward and backward inside a summon block (use_orig_params=False)."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp_lint.scenarios import _harness


def main():
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    model = FSDP(_harness.mlp(), device_id=where)
    batch = torch.randn(8, 64, device=where)
    with FSDP.summon_full_params(model):
        loss = model(batch).sum()
        loss.backward()
    _harness.report(hazard=False, detail=f"loss {float(loss):.4f}")
    _harness.finish()


if __name__ == "__main__":
    main()
