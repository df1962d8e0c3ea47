"""The text markers (``Rule.markers``, ``Rule.marker_needs``): a file they drop is one the
rule could not flag, and the needs drop files that only name a framework."""

import pytest

from fsdp_lint.engine import lint_text, names_a_topic
from fsdp_lint.rules import ALL_RULES, BY_CODE

FSD104 = BY_CODE["FSD104"]

# (name, text, wanted by FSD104's markers, flagged)
CASES = {
    # lightning's own modules name ``lightning.fabric`` and a rank without a Fabric call
    "lightning_internal": ('''\
import torch
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.fabric.utilities.cloud_io import get_filesystem


@rank_zero_only
def save_hparams(path, hparams, rank=0):
    fs = get_filesystem(path)
    with fs.open(path, "wb") as f:
        torch.save(hparams, f)
''', False, False),
    "fabric_under_another_name": ('''\
from lightning import Fabric as Launcher

launcher = Launcher(accelerator="cuda", devices=2, strategy="fsdp")
launcher.launch()


def checkpoint(state, path):
    if launcher.global_rank == 0:
        launcher.save(path, state)
''', True, True),
    "fabric_call_split_over_lines": ('''\
import lightning as L

fabric = L.Fabric(strategy="fsdp")


def end_of_epoch(state, path):
    if fabric.is_global_zero:
        (
            fabric
            .barrier()
        )
''', True, True),
    # accelerate's save_model gathers only under FSDP (or ZeRO-3): a DDP script is quiet
    "accelerate_without_fsdp": ('''\
from accelerate import Accelerator

accelerator = Accelerator()


def save(model, out_dir):
    if accelerator.is_main_process:
        accelerator.save_model(model, out_dir)
''', False, False),
    "accelerate_with_fsdp_plugin": ('''\
from accelerate import Accelerator, FullyShardedDataParallelPlugin

accelerator = Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin())


def save(model, out_dir):
    if accelerator.is_main_process:
        accelerator.save_model(model, out_dir)
''', True, True),
    "torch_dcp_get_state_dict": ('''\
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_state_dict


def save(model, optimizer, path):
    if dist.get_rank() == 0:
        model_sd, optim_sd = get_state_dict(model, optimizer)
        torch.save({"model": model_sd, "optim": optim_sd}, path)
''', True, True),
    # accelerate's gather is a collective in every distributed run; torch.gather and
    # torch.accelerator are not accelerate
    "accelerator_gather_on_main": ('''\
from accelerate import Accelerator

accelerator = Accelerator()


def report(loss):
    if accelerator.is_main_process:
        losses = accelerator.gather(loss.detach())
        print(losses.mean().item())
''', True, True),
    "torch_gather_and_torch_accelerator": ('''\
import torch
import torch.distributed as dist


def pick(logits, index):
    if dist.get_rank() == 0:
        torch.accelerator.synchronize()
        return torch.gather(logits, 1, index)
''', False, False),
    # a transformers Trainer's evaluate gathers under FSDP; a model's ``predict`` is not one
    "hf_trainer_evaluate_on_main": ('''\
from transformers import Trainer, TrainingArguments

args = TrainingArguments(output_dir="out", fsdp="full_shard auto_wrap")


def finish(model, test_set):
    trainer = Trainer(model=model, args=args)
    trainer.train()
    if trainer.is_world_process_zero():
        print(trainer.evaluate(eval_dataset=test_set))
''', True, True),
    "sklearn_predict_on_rank_zero": ('''\
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def probe(model: FSDP, classifier, features):
    if dist.get_rank() == 0:
        print(classifier.predict(features))
''', True, False),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fsd104_markers_keep_what_the_rule_flags(name):
    text, wanted, flagged = CASES[name]
    assert FSD104.wanted(text) is wanted
    unfiltered = type("Unfiltered", (FSD104,), {"markers": (), "marker_needs": {}})
    found = [d.code for d in lint_text(text, f"{name}.py", [unfiltered]).diagnostics]
    assert found == (["FSD104"] if flagged else [])
    assert [d.code for d in lint_text(text, f"{name}.py", [FSD104]).diagnostics] == found


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_marker_needs_name_first_group_markers(rule):
    assert set(rule.marker_needs) <= set(rule.markers[0] if rule.markers else ())


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_file_names_a_topic_when_a_marker_meets_its_need(name):
    text, wanted, _ = CASES[name]
    needs = {m: p for m, p in FSD104.marker_needs.items() if m in text}
    plain = [m for m in FSD104.markers[0] if m not in FSD104.marker_needs and m in text]
    expected = bool(plain) or any(p.search(text) for p in needs.values())
    assert names_a_topic(text, [FSD104]) is expected
    if wanted:
        assert names_a_topic(text, [FSD104])
