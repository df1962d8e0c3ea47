"""FSD005 scenario: an in-place edit inside a rank0_only=True summon; ranks diverge."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp_lint.scenarios import _harness


def main():
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    model = FSDP(_harness.mlp(), device_id=where)
    before = [p.detach().clone() for p in model.parameters()]
    with FSDP.summon_full_params(model, rank0_only=True, writeback=False):
        for param in model.parameters():
            param.data.add_(1.0)
    changed = any(not torch.equal(p.detach(), b) for p, b in zip(model.parameters(), before))
    flags = [bool(f) for f in _harness.gather(changed)]
    _harness.report(
        hazard=len(set(flags)) > 1,
        detail="edit kept on ranks " + ", ".join(str(r) for r, f in enumerate(flags) if f)
        + "; lost on ranks " + ", ".join(str(r) for r, f in enumerate(flags) if not f),
    )
    _harness.finish()


if __name__ == "__main__":
    main()
