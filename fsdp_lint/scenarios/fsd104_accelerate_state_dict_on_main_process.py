"""FSD104 scenario, accelerate form: ``accelerator.get_state_dict(model)`` under FSDP1 gathers
the full state dict (every rank must take part) but runs on the main process only."""

import torch
from accelerate import Accelerator, FullyShardedDataParallelPlugin
from accelerate.utils import DistributedType

from fsdp_lint.scenarios import _harness


def main():
    accelerator = Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin())
    if accelerator.distributed_type != DistributedType.FSDP:
        raise RuntimeError(f"accelerate did not enable FSDP here: {accelerator.distributed_type}")
    model = accelerator.prepare(_harness.mlp())
    if accelerator.is_main_process:
        state = accelerator.get_state_dict(model)
        print(f"gathered {len(state)} tensors", flush=True)
    accelerator.backward(model(torch.randn(8, 64, device=accelerator.device)).sum())
    _harness.report(hazard=False, detail="the step after the save completed")
    _harness.finish()


if __name__ == "__main__":
    main()
