"""FSD003 summon-offload-to-cpu-on-cpu-params."""

from __future__ import annotations

from fsdp_lint.diagnostics import SAFE, UNSAFE
from fsdp_lint.facts import torch_api
from fsdp_lint.facts.offload import CPU_DEVICE, cpu_param_evidence
from fsdp_lint.facts.summon import summon_calls
from fsdp_lint.facts.values import keyword_args, literal_bool
from fsdp_lint.fixes import drop_argument
from fsdp_lint.rules.base import FIX_SOMETIMES, FixProposal, Rule


class SummonOffloadToCpuOnCpuParams(Rule):
    code = "FSD003"
    name = "summon-offload-to-cpu-on-cpu-params"
    summary = "`offload_to_cpu=True` where the FSDP parameters already live on the CPU device (pytorch#188989)"
    fix_availability = FIX_SOMETIMES
    markers = (("summon_full_params", "FullStateDictConfig", "StateDictOptions"), ("cpu",))
    hazard_fixed_in = "2.14.1"
    gate_facts = ("fsdp_wrap", "cpu_string")  # FSDP on the CPU device: a wrap given a "cpu" device_id
    gate_calls = frozenset({torch_api.SUMMON, "FullStateDictConfig", "StateDictOptions"})
    gate_sites = True
    doc = """\
## What it does
Checks for `offload_to_cpu=True` in a torch FSDP `summon_full_params(...)` call in a module
that places FSDP on the CPU device (`device_id=torch.device("cpu")` or `device_id="cpu"`,
also through a variable). Also flags `FullStateDictConfig(offload_to_cpu=True, ...)` and
`StateDictOptions(full_state_dict=True, cpu_offload=True)` in such modules: they reach the
same code path without a user summon.

## Why is this bad?
`FlatParamHandle.to_cpu()` frees the unsharded flat parameter even when it already lives
on the CPU (pytorch/pytorch#188989, fixed in torch 2.14.1). Measured on torch 2.13.0, FSDP
on the CPU device, gloo:
- `use_orig_params=False`: `RuntimeError: setStorage: sizes [N], strides [1], storage
  offset 0, and itemsize 4 requiring a storage size of 4N are out of bounds for storage of
  size 0` at entry; later summons silently do nothing.
- `use_orig_params=True`: entry succeeds; reading a parameter kills the process (SIGSEGV).
- with the default `writeback=True`, the local shard is overwritten with freed memory on exit.
- the next forward raises `RuntimeError: Output 0 of Split is a view and is being modified
  inplace...`; with `rank0_only=True` only rank 0 breaks and the next collective hangs.
The state-dict paths (`FullStateDictConfig(offload_to_cpu=True, rank0_only=True)` +
`state_dict()`, `get_model_state_dict` with `cpu_offload=True`) make rank 0 fail or die
while rank 1 returns `{}`. The verifier also reproduced the entry RuntimeError on torch 2.11
(CPU, gloo); on CUDA the parameters live on the GPU and the bug is not reachable.

## Example
```python
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

model = FSDP(net, device_id=torch.device("cpu"))
with FSDP.summon_full_params(model, offload_to_cpu=True, writeback=False):
    weights = {n: p.clone() for n, p in model.named_parameters()}
```

## Use instead
```python
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

model = FSDP(net, device_id=torch.device("cpu"))
with FSDP.summon_full_params(model, writeback=False):
    weights = {n: p.clone() for n, p in model.named_parameters()}
```

## Known problems
- The rule needs the file to place FSDP on the CPU device itself (`device_id` given as
  `"cpu"` or `torch.device("cpu")`, also through a name); a device chosen outside the file
  (a parameter, a command-line option, a launcher config) is not seen and nothing is flagged.
- A summon whose model cannot be followed to its construction (a parameter, an attribute, a
  model built in another file) gets the module-level reading, as in FSD001: flagged when the
  file places some FSDP construction on the CPU device.
- `FullStateDictConfig(offload_to_cpu=True)` and `StateDictOptions(full_state_dict=True,
  cpu_offload=True)` are not tied to a model: they are flagged in any file that places FSDP
  on the CPU device; their arguments must be literal keywords (a variable is not read).
- The rule is off when `target-torch-version` is 2.14.1 or later; unset, it reports.

## Fix safety
For a summon the fix drops `offload_to_cpu=True`. It is safe when the summoned model's own
construction puts it on the CPU device on every path: the parameters are already on the
CPU, so the block sees the same tensors without the broken copy. It is unsafe when the
device is chosen at run time (`torch.device("cuda") if torch.cuda.is_available() else
torch.device("cpu")`) or the evidence is another model's in the same file: on a GPU the
block would then get GPU tensors. The state-dict
configurations get no automatic fix (dropping `cpu_offload` changes what is saved).

## References
- pytorch/pytorch#188989: `summon_full_params(offload_to_cpu=True)` with CPU-resident parameters
- [FSDP `summon_full_params`](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.summon_full_params)
"""

    def check(self, facts, report):
        devices = [e for e in cpu_param_evidence(facts) if e.kind == CPU_DEVICE]
        if not devices:
            return
        where = f"FSDP on the CPU device, line {report.row(devices[0].node)}"
        for summon in summon_calls(facts):
            if summon.value("offload_to_cpu") is not True:
                continue
            on_device = [e for e in summon.params_on_cpu(facts) if e.kind == CPU_DEVICE]
            if on_device:
                where = f"FSDP on the CPU device, line {report.row(on_device[0].node)}"
                report(
                    summon.node,
                    f"`offload_to_cpu=True` on parameters that already live on the CPU ({where}): "
                    "crashes or corrupts shards on torch < 2.14.1 (pytorch#188989); drop it",
                    (FixProposal(SAFE if all(e.certain for e in on_device) else UNSAFE, "Remove `offload_to_cpu=True`", summon.node,
                                drop_argument(summon.node, summon.args, "offload_to_cpu")) if summon.fixable else None),
                    statement=summon.site.ctx.statement,
                )
        for site in facts.calls:
            qualname = facts.qualname(site.node.func)
            kwargs = keyword_args(site.node)
            value = lambda key: literal_bool(kwargs[key].value) if key in kwargs else None  # noqa: E731
            if (qualname in torch_api.FULL_STATE_DICT_CONFIG and value("offload_to_cpu") is True) or (
                qualname in torch_api.STATE_DICT_OPTIONS
                and value("full_state_dict") is True
                and value("cpu_offload") is True
            ):
                report(
                    site.node,
                    f"a full state dict offloaded to the CPU from parameters on the CPU ({where}) reaches "
                    "pytorch#188989 on torch < 2.14.1: rank 0 fails or dies, other ranks return {}",
                    statement=site.ctx.statement,
                )
