"""Plumbing shared by the scenario programs (runs inside each torchrun rank).

Environment set by the verifier: FSDP_LINT_BACKEND (gloo|nccl), FSDP_LINT_DEVICE
(cpu|cuda), FSDP_LINT_RESULT_DIR (where ``report`` writes ``rank<N>.json``).

A framework form (accelerate, Lightning Fabric) lets the framework start the process group
from torchrun's environment instead of ``init()``; ``device_kind()``, ``torchrun_sizes()``
and ``result_dir()`` give it what to configure; ``report``, ``gather`` and ``finish`` work
the same once the framework has started the group.
"""

import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist


def init():
    """Start the process group; return (rank, world_size, device_kind, local_rank)."""
    backend = os.environ.get("FSDP_LINT_BACKEND", "gloo")
    device = os.environ.get("FSDP_LINT_DEVICE", "cpu")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend)
    torch.manual_seed(0)
    return dist.get_rank(), dist.get_world_size(), device, local_rank


def device_kind():
    """``cpu`` or ``cuda``: the device the verifier chose."""
    return os.environ.get("FSDP_LINT_DEVICE", "cpu")


def torchrun_sizes():
    """(ranks on this node, nodes), as torchrun started them: a framework's ``devices=`` and
    ``num_nodes=``."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    world = int(os.environ.get("WORLD_SIZE", str(local)))
    return local, max(1, world // local)


def result_dir():
    """A folder every rank of this node sees (the verifier's log folder of the program)."""
    return os.environ.get("FSDP_LINT_RESULT_DIR") or tempfile.gettempdir()


def mlp(width=64, depth=3):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def not_linear_init(tensors, fan_in=64):
    """How many of ``tensors`` hold what ``nn.Linear``'s init could not give: a non-finite
    value, one outside +-1/sqrt(fan_in), or all zeros (an empty local shard is fine)."""
    return sum(not (torch.isfinite(w).all() and (w.abs() <= fan_in ** -0.5).all() and (w.numel() == 0 or w.abs().sum() > 0))
               for w in tensors)


def report(**data):
    """Write this rank's measurements for the verifier's judge."""
    folder = os.environ.get("FSDP_LINT_RESULT_DIR")
    data.setdefault("torch", torch.__version__)
    if folder:
        path = os.path.join(folder, f"rank{dist.get_rank()}.json")
        with open(path, "w") as handle:
            json.dump(data, handle)
    print("REPORT", json.dumps(data), flush=True)


def gather(value, device="cpu"):
    """Every rank's float ``value`` (all_gather of a tensor: no pickling, no numpy)."""
    if os.environ.get("FSDP_LINT_DEVICE") == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
    mine = torch.tensor([float(value)], device=device)
    out = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(out, mine)
    return [float(t.item()) for t in out]


def finish():
    """Leave together, then exit without running C++ destructors: torch 2.13's gloo can
    abort at interpreter teardown ("terminate called without an active exception") after
    the program is done, which would read as a failure of the program itself."""
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def median(values):
    ordered = sorted(values)
    return ordered[len(ordered) // 2]
