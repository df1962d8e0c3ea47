"""FSD108 scenario: every rank saves its FSDP2 state dict to the same path."""

import os
import tempfile

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from fsdp_lint.scenarios import _harness


def main():
    rank, world, device, local_rank = _harness.init()
    model = _harness.mlp()
    if device == "cuda":
        model = model.cuda(local_rank)
    fully_shard(model)
    out_dir = os.environ.get("FSDP_LINT_RESULT_DIR") or tempfile.gettempdir()
    path = os.path.join(out_dir, "model.pt")
    torch.save(model.state_dict(), path)
    dist.barrier()
    # Did this rank's save survive? Compare the file with this rank's own shards.
    mine = {k: v.to_local().cpu() for k, v in model.state_dict().items()}
    try:
        loaded = torch.load(path, weights_only=False)
        kept = all(torch.equal(loaded[k].to_local().cpu(), mine[k]) for k in mine)
        problem = "" if kept else "the file holds another rank's shards"
    except Exception as error:  # noqa: BLE001 - a corrupted file is the hazard too
        kept, problem = False, f"torch.load failed: {type(error).__name__}: {error}"
    kept_all = _harness.gather(1.0 if kept else 0.0)
    dist.barrier()
    _harness.report(
        hazard=min(kept_all) < 1.0,
        detail=f"{int(sum(kept_all))} of {world} ranks' saves are in {os.path.basename(path)}"
        + (f"; this rank: {problem}" if problem else ""),
    )
    _harness.finish()


if __name__ == "__main__":
    main()
