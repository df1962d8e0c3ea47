"""FSD101 scenario, accelerate form: the optimizer is built from the model before
``accelerator.prepare(model, optimizer)`` wraps it with FSDP1 (``use_orig_params=False``);
accelerate re-points an optimizer for FSDP2 only, so its steps never reach the weights."""

import torch
from accelerate import Accelerator, FullyShardedDataParallelPlugin
from accelerate.utils import DistributedType
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp_lint.scenarios import _harness


def full_weights(model):
    with FSDP.summon_full_params(model, writeback=False):
        return [p.detach().clone() for p in model.parameters()]


def main():
    accelerator = Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(use_orig_params=False))
    if accelerator.distributed_type != DistributedType.FSDP:
        raise RuntimeError(f"accelerate did not enable FSDP here: {accelerator.distributed_type}")
    torch.manual_seed(0)
    model = _harness.mlp()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    before = full_weights(model)
    for _ in range(3):
        accelerator.backward(model(torch.randn(8, 64, device=accelerator.device)).square().mean())
        optimizer.step()
        optimizer.zero_grad()
    after = full_weights(model)
    changed = sum(int(not torch.equal(a, b)) for a, b in zip(after, before))
    _harness.report(hazard=changed == 0, detail=f"{changed}/{len(before)} parameters changed by 3 optimizer steps")
    _harness.finish()


if __name__ == "__main__":
    main()
