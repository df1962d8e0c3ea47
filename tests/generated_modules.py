"""Generated modules: FSDP snippets, rank tests of every shape the facts read, helpers and
aliases, spread over functions, methods and module level.  The gate (markers, screen and
the slice built from its sites) must change nothing on them: ``tests/test_screen.py``
draws them through hypothesis, ``tests/test_gate.py`` writes a fixed-seed set to files and
lints them through the command line with the gate on and off."""

import random

HEADERS = [
    "import functools", "import os", "import torch", "import torch.distributed as dist",
    "from torch.distributed import barrier as sync",
    "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, CPUOffload",
    "from torch.distributed.fsdp import fully_shard",
    "from torch.distributed.checkpoint.state_dict import get_model_state_dict",
    "from accelerate import Accelerator",
    "from lightning.pytorch.utilities import rank_zero_only",
]
GLOBALS = [
    "RANK0 = dist.get_rank() == 0", "LOCAL = int(os.environ['LOCAL_RANK'])",
    "WRAP = functools.partial(FSDP, use_orig_params=False)", "OFF = CPUOffload(offload_params=True)",
    "CFG = {'device_id': torch.device('cpu')}", "acc = Accelerator()", "Sharded = FSDP",
    "if not RANK0:\n    raise SystemExit",
]
HELPERS = [
    "def is_main():\n    return dist.get_rank() == 0\n",
    "def build(m):\n    return torch.optim.SGD(m.parameters(), lr=0.1)\n",
    "def shard(m, **kw):\n    return FSDP(m, **kw)\n",
    "def same(x):\n    return x\n",
    "def save(m: FSDP):\n    if RANK0:\n        return m.state_dict()\n",
    "def step(model, loader, opt):\n    for batch in loader:\n        main_step(model)\n        opt.step()\n",
    "def main_step(model):\n    with FSDP.summon_full_params(model):\n        pass\n",
]
STATEMENTS = [
    "model = FSDP(net)", "model = WRAP(net)", "fully_shard(model)", "model = shard(net, cpu_offload=OFF)",
    "model = FSDP(net, **CFG)", "model = FSDP(net, use_orig_params=False)",
    "opt = torch.optim.AdamW(model.parameters())", "opt = build(model)", "opt.step()", "loss.backward()",
    "sd = model.state_dict()", "dist.barrier()", "sync()", "get_model_state_dict(model)", "acc.wait_for_everyone()",
    "torch.save(model.state_dict(), 'm.pt')", "model.to(torch.bfloat16)", "model.half()", "model.cuda()",
    "out = model.generate(x)", "norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)", "print(norm.item())",
    "dist.init_process_group('nccl')", "FSDP.summon_full_params(model)", "flag = same(RANK0)",
    "model.save_pretrained('out')", "acc.save_model(model, 'out')", "self.model = FSDP(net)",
    "self.model.state_dict()", "self.model.generate(x)", "model = Sharded(net)", "save(model)",
    "self.opt = torch.optim.SGD(self.model.parameters())", "self.model.half()",
    "model = FSDP(model, use_orig_params=False)", "model = FSDP(model, cpu_offload=OFF)",
    "opt = torch.optim.SGD(model.parameters())\nfully_shard(model)\nopt.step()",
    "opt = torch.optim.SGD(model.parameters())\nmodel = WRAP(model)\nopt.step()",
    "fully_shard(model)\nnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\nprint(norm.item())",
    "model = FSDP(model, cpu_offload=OFF)\nmodel.cuda()",
]
TESTS = [
    "dist.get_rank() == 0", "RANK0", "is_main()", "acc.is_main_process", "flag", "LOCAL in (-1, 0)",
    "not RANK0", "step % 10 == 0", "x is None",
]
SUMMON_ARGUMENTS = ["", ", offload_to_cpu=True", ", rank0_only=True", ", with_grads=True"]


def _sample(rng: random.Random, items, low: int, high: int):
    return rng.sample(items, rng.randint(low, min(high, len(items))))


def _block_lines(rng: random.Random, indent: str):
    lines = []
    for _ in range(rng.randint(1, 6)):
        kind = rng.choice(["plain", "plain", "if", "with", "exit", "loop"])
        statement = rng.choice(STATEMENTS)
        test = rng.choice(TESTS)
        inner = statement.replace("\n", "\n" + indent + "    ")
        statement = statement.replace("\n", "\n" + indent)
        if kind == "plain":
            lines.append(indent + statement)
        elif kind == "if":
            lines += [f"{indent}if {test}:", f"{indent}    {inner}"]
        elif kind == "with":
            arg = rng.choice(SUMMON_ARGUMENTS)
            lines += [f"{indent}with FSDP.summon_full_params(model{arg}):", f"{indent}    {inner}"]
        elif kind == "exit":
            lines += [f"{indent}if not ({test}):", f"{indent}    return", indent + statement]
        else:
            lines += [f"{indent}for batch in loader:", f"{indent}    {inner}"]
    return lines


def generate(rng: random.Random) -> str:
    """One module, every choice drawn from ``rng``."""
    lines = _sample(rng, HEADERS, 2, 8)
    lines += _sample(rng, GLOBALS, 0, 4)
    lines += _sample(rng, HELPERS, 0, 3)
    for index in range(rng.randint(1, 4)):
        where = rng.choice(["function", "decorated", "method", "module"])
        if where == "module":
            lines += _block_lines(rng, "")
        elif where == "method":
            lines += [f"class Runner{index}:", "    def run(self, net, loader, x, loss, step):"]
            lines += _block_lines(rng, "        ")
            lines += ["    def later(self, net, loader, x, loss, step):"]
            lines += _block_lines(rng, "        ")
        else:
            if where == "decorated":
                lines.append("@rank_zero_only")
            lines.append(f"def f{index}(net, model, loader, x, loss, step, flag=False, self=None):")
            lines += _block_lines(rng, "    ")
    return "\n".join(lines) + "\n"


def modules(count: int, seed: int = 0):
    """``count`` modules from a fixed seed (the same set on every run)."""
    rng = random.Random(seed)
    return [generate(rng) for _ in range(count)]
