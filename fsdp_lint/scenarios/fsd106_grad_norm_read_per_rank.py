"""FSD106 scenario: an FSDP2 model's gradient norms logged with .item() (total and per parameter)."""

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from fsdp_lint.scenarios import _harness


def main():
    rank, _, device, local_rank = _harness.init()
    model = _harness.mlp()
    if device == "cuda":
        model = model.cuda(local_rank)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    where = next(model.parameters()).device
    torch.manual_seed(1 + dist.get_rank())  # each rank its own batch, as in data parallel training
    model(torch.randn(8, 64, device=where)).square().sum().backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e6)
    total = grad_norm.item()
    per_param = {}
    for name, param in model.named_parameters():
        per_param[name] = param.grad.norm().item()
    totals = _harness.gather(total)
    firsts = _harness.gather(per_param["0.weight"])

    def spread(values):
        return max(values) - min(values) > 1e-4 * max(values)

    _harness.report(
        hazard=spread(totals) or spread(firsts),
        detail=(
            f"total norm .item() per rank: {', '.join(f'{v:.4f}' for v in totals)}"
            f" ({'differ' if spread(totals) else 'agree'}); "
            f"0.weight norm .item() per rank: {', '.join(f'{v:.4f}' for v in firsts)}"
            f" ({'differ' if spread(firsts) else 'agree'})"
        ),
    )
    _harness.finish()


if __name__ == "__main__":
    main()
