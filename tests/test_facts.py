"""Module facts: name resolution through imports, offload evidence, training loops."""

import textwrap

import libcst as cst
import pytest

from fsdp_lint.facts.index import index_module


def facts_of(code):
    return index_module(cst.parse_module(textwrap.dedent(code)))


@pytest.mark.parametrize(
    "imports,expr",
    [
        ("import torch.distributed.fsdp as fsdp", "fsdp.FullyShardedDataParallel"),
        ("from torch.distributed.fsdp import FullyShardedDataParallel as FSDP", "FSDP"),
        ("import torch", "torch.distributed.fsdp.FullyShardedDataParallel"),
        ("import torch.distributed.fsdp", "torch.distributed.fsdp.FullyShardedDataParallel"),
        ("from torch.distributed import fsdp", "fsdp.FullyShardedDataParallel"),
        ("from torch.distributed.fsdp import FullyShardedDataParallel\nFSDP = FullyShardedDataParallel", "FSDP"),
    ],
)
def test_resolves_fsdp_class(imports, expr):
    facts = facts_of(f"{imports}\nx = {expr}\n")
    binding = [b for b in facts.bindings if b.target == "x"][0]
    assert facts.qualname(binding.value) in {
        "torch.distributed.fsdp.FullyShardedDataParallel",
    }


@pytest.mark.parametrize(
    "code",
    [
        "from fairscale.nn import FullyShardedDataParallel as FSDP\nx = FSDP",
        "class FSDP: pass\nx = FSDP",
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\nclass FSDP: pass\nx = FSDP",
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
        "from fairscale.nn import FullyShardedDataParallel as FSDP\nx = FSDP",
        "from .fsdp import FullyShardedDataParallel as FSDP\nx = FSDP",
    ],
)
def test_not_torch_fsdp(code):
    facts = facts_of(code + "\n")
    binding = [b for b in facts.bindings if b.target == "x"][0]
    assert facts.qualname(binding.value) != "torch.distributed.fsdp.FullyShardedDataParallel"


@pytest.mark.parametrize(
    "code,kinds",
    [
        ("from torch.distributed.fsdp import CPUOffload\nc = CPUOffload(True)", {"CPUOffload(offload_params=True)"}),
        ("from torch.distributed.fsdp import CPUOffload\nc = CPUOffload(offload_params=False)", set()),
        ("from torch.distributed.fsdp import CPUOffload\nc = CPUOffload(offload_params=flag)", set()),
        ("from torch.distributed.fsdp import CPUOffloadPolicy\nc = CPUOffloadPolicy()", {"CPUOffloadPolicy"}),
        (
            "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as F\n"
            "m = F(net, device_id='cpu')",
            {"device_id on the CPU"},
        ),
        (
            "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as F\n"
            "d = torch.device('cpu')\nm = F(net, device_id=d)",
            {"device_id on the CPU"},
        ),
        (
            "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as F\n"
            "m = F(net, device_id=torch.device('cuda'))",
            set(),
        ),
        ("class CPUOffload: pass\nc = CPUOffload(True)", set()),
    ],
)
def test_offload_evidence(code, kinds):
    facts = facts_of(code + "\n")
    assert {e.kind for e in facts.cpu_param_evidence()} == kinds


def test_training_loop_needs_step_in_the_loop_itself():
    facts = facts_of(
        """
        for epoch in range(3):
            for batch in loader:
                loss.backward()
            marker_epoch()
            for x in other:
                marker_inner()
        """
    )
    sites = {s.attr: s for s in facts.calls}
    assert facts.per_step_loop(sites["marker_epoch"].ctx) is None
    assert facts.per_step_loop(sites["marker_inner"].ctx) is None
