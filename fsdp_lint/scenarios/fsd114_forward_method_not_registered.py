"""FSD114 scenario: a method other than forward (encode) on a fully_shard-ed model after a
training step, without register_fsdp_forward_method."""

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method  # noqa: F401 - the fixed program uses it

from fsdp_lint.scenarios import _harness


class Encoder(torch.nn.Module):
    def __init__(self, vocab=128, dim=64, depth=2):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(dim, dim) for _ in range(depth))
        self.head = torch.nn.Linear(dim, vocab)

    def encode(self, ids):
        h = self.embed(ids)
        for layer in self.layers:
            h = torch.relu(layer(h))
        return h

    def forward(self, ids):
        return self.head(self.encode(ids))


def main():
    rank, world, device, _ = _harness.init()
    model = Encoder()
    if device == "cuda":
        model = model.cuda()
    mesh = init_device_mesh(device, (world,))
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    ids = torch.randint(0, 128, (4, 8), device=device)
    model(ids).sum().backward()
    features = model.encode(ids)
    _harness.report(hazard=False, detail=f"encode() ran: features {tuple(features.shape)}")
    _harness.finish()


if __name__ == "__main__":
    main()
