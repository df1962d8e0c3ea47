"""Whether the module keeps FSDP parameters on the CPU, and where it says so.

Evidence, any of:
- ``CPUOffload(offload_params=True)`` / ``CPUOffload(True)`` (torch's class, any alias),
  wherever it is built: passed directly, through a variable or module constant, or in a
  conditional (``... if args.offload else None`` still configures offload);
- FSDP2 ``CPUOffloadPolicy(...)``;
- FSDP placed on the CPU device: ``device_id=torch.device("cpu")`` or ``device_id="cpu"``
  (also through a variable assigned once), where pytorch#188989 reproduces.
Offload chosen only by an external config (YAML, accelerate) is invisible and not guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import libcst as cst

from fsdp_lint.facts import torch_api
from fsdp_lint.facts.fsdp_modules import fsdp_modules
from fsdp_lint.facts.model import ModuleFacts
from fsdp_lint.facts.values import bind_arguments, literal_bool, literal_string

CPU_OFFLOAD = "CPUOffload(offload_params=True)"
OFFLOAD_POLICY = "CPUOffloadPolicy"
CPU_DEVICE = "device_id on the CPU"


@dataclass(eq=False)
class OffloadEvidence:
    kind: str  # CPU_OFFLOAD, OFFLOAD_POLICY or CPU_DEVICE
    node: cst.CSTNode


def _is_cpu_device(facts: ModuleFacts, expr: Optional[cst.BaseExpression], depth: int = 0) -> bool:
    if expr is None or depth > 3:
        return False
    text = literal_string(expr)
    if text is not None:
        return text == "cpu" or text.startswith("cpu:")
    if isinstance(expr, cst.Call) and facts.qualname(expr.func) in torch_api.TORCH_DEVICE:
        first = next((a for a in expr.args if a.keyword is None and not a.star), None)
        if first is None:
            kw = [a for a in expr.args if a.keyword is not None and a.keyword.value == "type"]
            first = kw[0] if kw else None
        return first is not None and _is_cpu_device(facts, first.value, depth + 1)
    if isinstance(expr, cst.Name):
        return _is_cpu_device(facts, facts.single_value(expr.value), depth + 1)
    return False


def _is_param_offload(facts: ModuleFacts, call: cst.Call) -> bool:
    if facts.qualname(call.func) not in torch_api.CPU_OFFLOAD:
        return False
    bound, _ = bind_arguments(call.args, ("offload_params",))
    arg = bound.get("offload_params")
    return arg is not None and literal_bool(arg.value) is True


def offloads_params(facts: ModuleFacts, expr: Optional[cst.BaseExpression], depth: int = 0) -> bool:
    """``expr`` (a ``cpu_offload=`` value) is, or may be, ``CPUOffload(offload_params=True)``:
    directly, through a name assigned once, or as a branch of a conditional."""
    if expr is None or depth > 3:
        return False
    if isinstance(expr, cst.Call):
        return _is_param_offload(facts, expr)
    if isinstance(expr, cst.IfExp):
        return offloads_params(facts, expr.body, depth + 1) or offloads_params(facts, expr.orelse, depth + 1)
    if isinstance(expr, cst.Name):
        return offloads_params(facts, facts.single_value(expr.value), depth + 1)
    return False


def _compute(facts: ModuleFacts) -> List[OffloadEvidence]:
    evidence: List[OffloadEvidence] = []
    for site in facts.calls:
        qualname = facts.qualname(site.node.func)
        if _is_param_offload(facts, site.node):
            evidence.append(OffloadEvidence(CPU_OFFLOAD, site.node))
        elif qualname in torch_api.CPU_OFFLOAD_POLICY:
            evidence.append(OffloadEvidence(OFFLOAD_POLICY, site.node))
    for wrap in fsdp_modules(facts).wraps:
        device = wrap.kwargs.get("device_id")
        if device is not None and _is_cpu_device(facts, device.value):
            evidence.append(OffloadEvidence(CPU_DEVICE, wrap.site.node))
    return evidence


def cpu_param_evidence(facts: ModuleFacts) -> List[OffloadEvidence]:
    return facts.cached("cpu_param_evidence", _compute)
