"""FSD118 scenario: a small language model whose output head is tied to its embedding, the two
modules sharded in separate fully_shard groups, then trained for three steps."""

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from fsdp_lint.scenarios import _harness

VOCAB, WIDTH = 30, 16  # 30 rows: uneven over 4 ranks, even over 1 and 2


class TiedLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.body = torch.nn.Linear(WIDTH, WIDTH)
        self.lm_head = torch.nn.Linear(WIDTH, VOCAB, bias=False)
        self.lm_head.weight = self.embed.weight

    def forward(self, tokens):
        return self.lm_head(torch.relu(self.body(self.embed(tokens))))


def main():
    _, world, device, _ = _harness.init()
    model = TiedLM()
    if device == "cuda":
        model = model.cuda()
    mesh = init_device_mesh(device, (world,))
    fully_shard(model.embed, mesh=mesh)
    fully_shard(model.lm_head, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    tokens = torch.randint(0, VOCAB, (4, 8), device=device)
    for _ in range(3):
        torch.nn.functional.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten()).backward()
        optimizer.step()
        optimizer.zero_grad()
    tied = model.lm_head.weight is model.embed.weight
    _harness.report(hazard=not tied, detail=f"after 3 steps lm_head.weight is embed.weight: {tied}")
    _harness.finish()


if __name__ == "__main__":
    main()
