"""The model and its FSDP wrapping, configured by ``config.TrainConfig``."""

import os

import torch
from torch import nn
from torch.distributed.fsdp import CPUOffload
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.relu(self.proj(self.norm(x)))


class TinyModel(nn.Module):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def build_model(config) -> FSDP:
    torch.manual_seed(0)
    model = TinyModel(config.width, config.depth)
    if config.fsdp_device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    else:
        device = torch.device(config.fsdp_device)
    return FSDP(
        model,
        device_id=device,
        cpu_offload=CPUOffload(offload_params=config.param_offload and device.type == "cuda"),
        use_orig_params=True,
    )
