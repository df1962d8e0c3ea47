"""Twelve real FSDP bug reports (GitHub threads named in each ``PROVENANCE.md``) rebuilt as
small projects under ``fixtures/reports/``: fsdp-lint must find each one's hazard from a
whole-tree run and from a one-file run of the failing script, and where FSDP is turned on
outside that script (a launcher config, a shell command) the message must name it.  A
report the linter cannot cover yet is an explicit xfail naming the missing capability."""

import json
from pathlib import Path

import pytest
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "fixtures" / "reports"

# slug: (the failing file, the line it fails on (a fragment of its text), rule,
#        where FSDP is turned on when the message must name it (None: in the file itself),
#        xfail reason or None)
CASES = {
    "accelerate_save_state_main": ("train.py", "accelerator.save_state(save_state_dir)", "FSD104",
                                   "configs/fsdp.yaml:2", None),
    "accelerate_get_state_dict_main": ("test_fsdp.py", "accelerator.get_state_dict(unet)", "FSD104",
                                       "fsdp_config.yaml:2", None),
    "ctclip_trainer_use_fsdp": ("ct_clip/trainer.py", "self.accelerator.get_state_dict(self.CTClip", "FSD104",
                                "scripts/run_train.sh", None),
    "trainer_save_model_is_main": ("workspace/train.py", "trainer.save_model()", "FSD104", None, None),
    "fabric_save_rank_zero": ("main.py", "fabric.save(", "FSD104", None, None),
    "helper_collective_rank_zero": ("bergson/train.py", "save_second_moments_as_optimizer_pt(model", "FSD104",
                                    None, None),
    "accelerate_model_prepared_alone": ("train.py", "torch.optim.AdamW(model.parameters()", "FSD101",
                                        "run.sh:2", None),
    "accelerate_orig_params_false": ("run_clm_no_trainer.py", "torch.optim.AdamW(groups", "FSD101",
                                     "configs/fsdp_no_orig.yaml:2", None),
    "fsdp2_forward_before_optimizer": ("repro.py", "torch.optim.SGD(", "FSD119", None, None),
    "fsdp1_state_dict_rank_zero": ("load_and_save.py", "fsdp_model.state_dict()", "FSD104", None, None),
    "nanogpt_optimizer_before_fsdp": ("model_zoo/nanogpt/train.py", "model.configure_optimizers(", "FSD101",
                                      None, None),
    "accelerate_save_pretrained_every_rank": ("main.py", "unwrapped_model.save_pretrained(NAME)", "FSD108",
                                              "fsdp.yaml:2", None),
}


def _cli(path):
    done = run_cli("check", "--no-cache", "--exit-zero", "--format", "json", path, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _line_of(path: Path, fragment: str) -> int:
    (row,) = [i for i, line in enumerate(path.read_text().splitlines(), 1) if fragment in line]
    return row


def test_every_report_has_its_provenance_and_a_case():
    assert sorted(p.name for p in REPORTS.iterdir() if p.is_dir()) == sorted(CASES)
    for slug in CASES:
        provenance = (REPORTS / slug / "PROVENANCE.md").read_text()
        assert "https://github.com/" in provenance and CASES[slug][2] in provenance


@pytest.mark.parametrize("slug", sorted(CASES))
def test_the_report_is_found_from_the_tree_and_from_its_file(slug, request):
    relative, fragment, code, turned_on, missing = CASES[slug]
    if missing:
        request.applymarker(pytest.mark.xfail(reason=missing, strict=True))
    project = REPORTS / slug
    row = _line_of(project / relative, fragment)
    for target in (project, project / relative):
        records = [r for r in _cli(target) if Path(r["filename"]).resolve() == (project / relative).resolve()]
        found = [r for r in records if r["code"] == code and r["location"]["row"] == row]
        assert found, (target, [(r["code"], r["location"]["row"]) for r in records])
        if turned_on:
            assert f"FSDP is turned on by {turned_on}" in found[0]["message"] or turned_on in found[0]["message"]


def test_at_least_nine_of_twelve_are_covered():
    assert sum(1 for case in CASES.values() if case[4] is None) >= 9
