"""Helpers that need the full (unsharded) parameters: EMA buffers with full shapes."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def create_ema_buffers(model, config):
    """Zero-initialised EMA buffers shaped like the full parameters (shapes only: the block
    reads no parameter data, so one would expect it to leave the model untouched)."""
    with FSDP.summon_full_params(model, offload_to_cpu=config.gather_on_cpu):
        shapes = {name: tuple(param.shape) for name, param in model.named_parameters()}
        buffers = {name: torch.zeros(shape) for name, shape in shapes.items()}
    return buffers
