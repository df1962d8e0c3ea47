"""FSD003 scenario: summon with offload_to_cpu=True, FSDP on the CPU device.

torch <= 2.13 (pytorch#188989): RuntimeError (setStorage ... storage of size 0) at entry.
"""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp_lint.scenarios import _harness


def main():
    _harness.init()
    model = FSDP(_harness.mlp(), device_id=torch.device("cpu"))
    with FSDP.summon_full_params(model, offload_to_cpu=True, writeback=False):
        total = sum(float(p.sum()) for p in model.parameters())
    _harness.report(hazard=False, detail=f"summon entered and read the parameters (sum {total:.3f})")
    _harness.finish()


if __name__ == "__main__":
    main()
