"""FSD115 scenario: a Llama-shaped model whose layers get a bf16 MixedPrecisionPolicy and
whose root fully_shard gets none; the dtypes the root's own modules compute in are measured."""

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from fsdp_lint.scenarios import _harness


class RMSNorm(torch.nn.Module):
    """transformers' LlamaRMSNorm: normalise in float32, scale in the weight's dtype."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class Decoder(torch.nn.Module):
    def __init__(self, vocab=128, dim=64, depth=2):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(dim, dim) for _ in range(depth))
        self.norm = RMSNorm(dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)

    def forward(self, ids):
        h = self.embed(ids)
        for layer in self.layers:
            h = torch.relu(layer(h))
        self.layer_dtype = h.dtype
        return self.head(self.norm(h))


def main():
    rank, world, device, _ = _harness.init()
    model = Decoder()
    if device == "cuda":
        model = model.cuda()
    mesh = init_device_mesh(device, (world,))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh)
    ids = torch.randint(0, 128, (4, 8), device=device)
    logits = model(ids)
    logits.float().sum().backward()
    _harness.report(hazard=logits.dtype != model.layer_dtype,
                    detail=f"layers compute in {model.layer_dtype}, the root's norm and head in {logits.dtype} "
                    f"(logits {logits.dtype})")
    _harness.finish()


if __name__ == "__main__":
    main()
