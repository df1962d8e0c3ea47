"""A small FSDP training job spread over three modules (see README.md).

    torchrun --nproc_per_node=2 examples/offload_in_config/train.py --steps 4
    fsdp-lint verify --program examples/offload_in_config/train.py -- --steps 4
"""

import argparse

import torch
import torch.distributed as dist

from checkpoint_utils import create_ema_buffers
from config import load_config
from modeling import build_model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    config = load_config()
    dist.init_process_group(config.backend)
    model = build_model(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
    ema = create_ema_buffers(model, config)
    device = next(model.parameters()).device
    for step in range(args.steps):
        batch = torch.randn(config.batch_size, config.width, device=device)
        loss = model(batch).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if dist.get_rank() == 0:
            print(f"step {step}: loss {loss.item():.4f}, {len(ema)} EMA buffers", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
