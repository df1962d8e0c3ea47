"""FSD107 scenario: a trained FSDP1 model cast to bf16 to save a bf16 checkpoint."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fsdp_lint.scenarios import _harness


def main():
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    model = FSDP(_harness.mlp(), device_id=where)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model(torch.randn(8, 64, device=where)).square().sum().backward()
    optimizer.step()
    model.to(torch.bfloat16)
    state = model.state_dict()
    dtypes = sorted({str(v.dtype) for v in state.values()})
    _harness.report(hazard=False, detail=f"state dict of {len(state)} tensors, dtypes {', '.join(dtypes)}")
    _harness.finish()


if __name__ == "__main__":
    main()
