"""Training configuration, read from the environment (a YAML file in a real project).

FSDP's placement and offload live here, far from the code that wraps the model and from
the code that gathers its parameters: a static check of those files cannot see them.
"""

import os
from dataclasses import dataclass


@dataclass
class TrainConfig:
    width: int = 256
    depth: int = 4
    lr: float = 1e-3
    batch_size: int = 8
    # where FSDP keeps the parameters: "cpu" (no accelerator), or "cuda" with host offload
    fsdp_device: str = "cpu"
    param_offload: bool = True
    # gather full parameters into host memory for the EMA / export helpers
    gather_on_cpu: bool = True
    backend: str = "gloo"


def load_config() -> TrainConfig:
    config = TrainConfig()
    if os.environ.get("TRAIN_DEVICE", "cpu") == "cuda":
        config.fsdp_device = "cuda"
        config.backend = "nccl"
    return config
