"""FSD008 scenario: a forward hook that summons the full parameters."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp_lint.scenarios import _harness

model = None


def log_norms(module, inputs, output):
    with FSDP.summon_full_params(model, writeback=False):
        return None


def main():
    global model
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    net = _harness.mlp()
    model = FSDP(net, device_id=where)
    net[0].register_forward_hook(log_norms)
    loss = model(torch.randn(8, 64, device=where)).sum()
    _harness.report(hazard=False, detail=f"loss {float(loss):.4f}")
    _harness.finish()


if __name__ == "__main__":
    main()
