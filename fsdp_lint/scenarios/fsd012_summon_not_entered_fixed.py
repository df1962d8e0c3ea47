"""FSD012 scenario, fixed by hand: the summon is entered with `with`."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp_lint.scenarios import _harness


def main():
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    net = _harness.mlp()
    full_shapes = [tuple(p.shape) for p in net.parameters()]
    model = FSDP(net, device_id=where, use_orig_params=True)
    with FSDP.summon_full_params(model, writeback=False):
        seen = [tuple(p.shape) for p in model.parameters()]
    wrong = sum(1 for a, b in zip(seen, full_shapes) if a != b)
    _harness.report(hazard=wrong > 0, detail=f"{wrong}/{len(seen)} parameters not full inside the block")
    _harness.finish()


if __name__ == "__main__":
    main()
