"""FSD117 scenario: an MLP built on the meta device, fully_shard-ed, materialised with
to_empty() and trained with no re-initialisation; are the parameters nn.Linear's init?"""

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from fsdp_lint.scenarios import _harness


def main():
    _, world, device, _ = _harness.init()
    with torch.device("meta"):
        model = _harness.mlp()
    mesh = init_device_mesh(device, (world,))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device=device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    full = [p.full_tensor().float() for p in model.parameters()]  # gathered copies, before the first step
    batch = torch.randn(8, 64, device=device)
    loss = model(batch).pow(2).mean()
    loss.backward()
    optimizer.step()
    bad = _harness.not_linear_init(full)
    _harness.report(hazard=bad > 0, detail=f"{bad}/6 parameters not nn.Linear's init after to_empty; "
                    f"first loss {loss.item():.3g}")
    _harness.finish()


if __name__ == "__main__":
    main()
