"""The framework forms run for real: torchrun, the framework at the pinned version.

Skipped where the framework is not installed at that version (CI's test venv: the frameworks
are the ``verify-frameworks`` extra, not ``test``): ``pip install -e '.[verify-frameworks]'``.
On CPU only the Lightning Fabric forms with ``ModelParallelStrategy`` (FSDP2) run: accelerate's
FSDP and Fabric's ``strategy="fsdp"`` need GPUs (their SKIPPED reasons quote the frameworks'
sources); the GPU test runs those where two CUDA devices are present.
"""

import json

import pytest

torch = pytest.importorskip("torch")

from fsdp_lint.scenarios.registry import forms, scenario_for  # noqa: E402
from fsdp_lint.verify.scenario import installed_versions, spec_matches  # noqa: E402

CODES = ("FSD101", "FSD104")


def _needs(*wanted, device="cpu"):
    """Skip unless this interpreter has each form's packages at the pinned version."""
    for code in CODES:
        for form in wanted:
            scenario = scenario_for(code, device, form)
            for name, spec in (scenario.packages if scenario else {}).items():
                found = installed_versions([name])[name]
                if found is None or not spec_matches(found, spec):
                    pytest.skip(f"needs {name}{spec}, found {found or 'none'}")


def _cpu_forms():
    """The framework forms (a form of torch alone, FSD104's ``load``, is judged with the
    rules) that run on the CPU."""
    return sorted({f for code in CODES for f in forms(code) if f and "cpu" in scenario_for(code, "cpu", f).devices
                   and scenario_for(code, "cpu", f).packages})


@pytest.mark.slow
def test_cpu_runnable_framework_forms_are_confirmed(verify_every_rule_on_cpu):
    """Judged on the session's run of every rule and form (``verify_every_rule_on_cpu``):
    its rows of these forms are what ``verify FSD101 FSD104 --form fabric-fsdp2`` gives."""
    wanted = _cpu_forms()
    assert wanted == ["fabric-fsdp2"]
    _needs(*wanted)
    run = verify_every_rule_on_cpu
    result, tmp_path, data = run.result, run.log_dir, run.data
    assert data is not None, result.stderr
    rows = run.rows(codes=CODES, forms=wanted)
    assert set(rows) == {(code, form) for code in CODES for form in wanted}
    # every row CONFIRMED: what exit status 0 of a run of only these forms says
    assert {key: r["verdict"] for key, r in rows.items()} == dict.fromkeys(rows, "CONFIRMED"), data
    assert data["packages"]["lightning"] == "2.6.6"
    assert rows[("FSD101", "fabric-fsdp2")]["flagged"] == "ranks 0, 1: 0/6 parameters changed by 3 optimizer steps"
    hang = rows[("FSD104", "fabric-fsdp2")]["flagged"]
    assert hang.startswith("hang at the 60 s timeout: rank 0 `fabric.save(path, {\"model\": model})`"), hang
    assert (tmp_path / "FSD104-fabric-fsdp2" / "flagged" / "rank0.log").exists()
    assert "[FSD104 (fabric-fsdp2)] flagged program: started" in result.stderr


@pytest.mark.slow
def test_gpu_framework_forms_are_confirmed(cli, tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 CUDA devices")
    wanted = ["accelerate", "fabric", "fabric-fsdp2"]
    _needs(*wanted, device="cuda")
    args = [arg for form in wanted for arg in ("--form", form)]
    result = cli("verify", *CODES, *args, "--device", "cuda", "--format", "json", "--log-dir", tmp_path)
    data = json.loads(result.stdout)
    verdicts = {(r["code"], r["form"]): r["verdict"] for r in data["results"]}
    assert verdicts == dict.fromkeys(verdicts, "CONFIRMED"), data
    assert len(verdicts) == 5
    assert result.returncode == 0, result.stderr
