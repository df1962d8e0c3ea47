"""FSD105 scenario: model.generate(...) on an FSDP1 language model after a training step."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

from fsdp_lint.scenarios import _harness


class Block(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.proj = torch.nn.Linear(width, width)

    def forward(self, hidden):
        return hidden + torch.relu(self.proj(hidden))


class TinyLM(torch.nn.Module):
    """Embedding and head at the root, blocks wrapped as their own FSDP units (as an HF model)."""

    def __init__(self, vocab=32, width=16, depth=2):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(depth))
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, ids):
        hidden = self.embed(ids)
        for block in self.blocks:
            hidden = block(hidden)
        return self.head(hidden)

    @torch.no_grad()
    def generate(self, ids, max_new_tokens):
        for _ in range(max_new_tokens):
            ids = torch.cat([ids, self(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
        return ids


def main():
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    model = FSDP(TinyLM(), auto_wrap_policy=ModuleWrapPolicy({Block}), device_id=where, use_orig_params=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = torch.randint(0, 32, (4, 8), device=where)
    model(batch).logsumexp(-1).mean().backward()
    optimizer.step()
    prompt = batch[:, :4]
    tokens = model.generate(prompt, max_new_tokens=4)
    agree = _harness.gather(float(tokens.sum()))
    _harness.report(hazard=False, detail=f"generated {tuple(tokens.shape)} tokens; ranks agree: {len(set(agree)) == 1}")
    _harness.finish()


if __name__ == "__main__":
    main()
