"""Which scenario proves which rule: the verifier's registry, keyed by rule code.

Rules never import the verifier: a rule is named here by its code (plain data), and
``fsdp-lint verify``, ``fsdp-lint rule`` and the docs look scenarios up with
``variants(code)``, ``forms(code)``, ``scenario_for(code, device, form)`` and
``scenarios_for(code, device)`` (one per form).

Format (one entry per rule)::

    "FSD123": Scenario(program="fsd123_<name>.py", hazard="...", ...),

or a tuple of scenarios, for two reasons that combine:

- *variants* of one form, when the hazard shows differently per device, each with its own
  ``devices``; the first variant of a form that runs on the chosen device is used::

      "FSD001": (Scenario(..., devices=("cpu",)), Scenario(..., devices=("cuda",))),

- *forms*, the same hazard reached another way (a framework's own call), named by
  ``form``; every form runs, each is judged and recorded on its own (``FSD104 (accelerate)``).
  The plain torch form is ``form=""`` and comes first; a form that imports a framework
  names it, pinned, in ``packages`` (unmet: SKIPPED with the reason)::

      "FSD104": (Scenario(program="fsd104_....py", ...),
                 Scenario(program="fsd104_accelerate_....py", form="accelerate",
                          packages={"accelerate": "==1.15.0"}, devices=("cuda",), ...)),

``Scenario`` (fsdp_lint/verify/scenario.py) documents every field.  Adding a rule: write
``fsdp_lint/scenarios/fsd123_<name>.py`` (a program in the pattern the rule flags, using
``_harness``) and add its entry below; ``tests/test_scenarios.py`` checks every rule has one.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple, Union

from fsdp_lint.verify.scenario import Scenario

NO_SHARD_AT_ONE_RANK = "with one rank FSDP switches to NO_SHARD"

# The frameworks' forms, pinned to the versions the rule docs cite (`pip install '.[verify-frameworks]'` from the clone).
ACCELERATE = {"accelerate": "==1.15.0"}
LIGHTNING = {"lightning": "==2.6.6"}
ACCELERATE_FSDP_NEEDS_AN_ACCELERATOR = (
    "accelerate 1.15.0 enables its FSDP plugin only over an accelerator's process group (AcceleratorState, "
    "state.py l. 986-1013: MULTI_GPU, MULTI_NPU, MULTI_XPU, ...); on CPU it picks MULTI_CPU with cpu=True "
    "(l. 800-808) and no distributed type without it (l. 814-815), and never wraps the model with FSDP"
)
FABRIC_FSDP_NEEDS_A_GPU = (
    "Lightning 2.6.6 refuses strategy=\"fsdp\" off GPU: \"You selected the FSDP strategy but FSDP is only "
    "available on GPU\" (fabric/connector.py l. 433-439); past that check its FSDPStrategy wraps with "
    "device_id=root_device.index (strategies/fsdp.py l. 303), None on CPU, and torch's FSDP then raises "
    "\"FSDP needs a non-CPU accelerator device\""
)
ONE_RANK_HANG = "a collective on one rank only hangs when there is a peer to wait for"
HANG_ERRORS = (r"(Connection closed by peer|Connection reset by peer|Timed out waiting for|"
               r"Watchdog caught collective operation timeout)",)
HANG = ("the job hangs: once it is stuck (on CPU: no rank progressed for a few seconds; else at the timeout) "
        "each rank's stack (faulthandler) shows the collective it is blocked in; "
        "or a rank fails in a mismatched collective")


# what FSDP1 raises when the root's own parameters are used outside its forward (FSD105)
_FSD105_ERRORS = (
    r"'weight' must be 2-D",
    r"setStorage: sizes \[\d+(?:, \d+)*\], strides \[\d+(?:, \d+)*\], storage offset \d+, and itemsize \d+ requiring a storage size",
    r"mat1 and mat2 shapes cannot be multiplied",
    # use_orig_params=False, with autograd on: the root's weights are views of its flat
    # parameter, which the optimizer step changed in place
    r"Output 0 of View is a view and its base or another view of its base has been modified inplace",
)

SCENARIOS: Dict[str, Union[Scenario, Tuple[Scenario, ...]]] = {
    "FSD001": (
        Scenario(
            program="fsd001_summon_writeback_with_cpu_offload.py",
            hazard="pytorch#188989 (FSDP on the CPU device, offload_to_cpu=True, default writeback): the local "
            "shard differs after a read-only summon block (compared element-wise)",
            devices=("cpu",),
            min_ranks=2,
            ranks_why=NO_SHARD_AT_ONE_RANK + ", where offload_to_cpu=True raises NotImplementedError",
            hazard_fixed_in="2.14.1",
        ),
        Scenario(
            program="fsd001_summon_writeback_with_cpu_offload_cuda.py",
            hazard="real CPUOffload(offload_params=True) on GPUs: a read-only summon with the default writeback "
            "takes at least 1.25x as long as with writeback=False (every rank copies its slice back to host memory)",
            devices=("cuda",),
            real_cpu_offload=True,
            min_ranks=2,
            ranks_why=NO_SHARD_AT_ONE_RANK + ": no shard to write back into",
            slowdown=1.25,
            timeout=300.0,
        ),
    ),
    "FSD002": Scenario(
        program="fsd002_summon_in_training_loop.py",
        fixed_by=((
            "        with FSDP.summon_full_params(model, writeback=False):\n"
            "            count = sum(p.numel() for p in model.parameters())\n",
            "        if step % 1000 == 0:\n"
            "            with FSDP.summon_full_params(model, writeback=False):\n"
            "                count = sum(p.numel() for p in model.parameters())\n",
        ),),
        hazard="every training step all-gathers the full model once more inside the summon block (bytes counted "
        "at FSDP's flat-parameter all-gather; each program's median step time reported beside it)",
        min_ranks=2,
        ranks_why=NO_SHARD_AT_ONE_RANK + ": the summon gathers nothing",
    ),
    "FSD003": Scenario(
        program="fsd003_summon_offload_to_cpu_on_cpu_params.py",
        hazard="RuntimeError (setStorage ... storage of size 0) at entry, SIGSEGV on access, or a changed shard",
        errors=(r"setStorage: sizes \[\d+\].*storage of size 0",),
        signal_is_hazard=True,
        devices=("cpu",),
        not_on={"cuda": "the bug needs FSDP parameters on the CPU device; on CUDA they are on the GPU"},
        min_ranks=2,
        ranks_why=NO_SHARD_AT_ONE_RANK + ", where offload_to_cpu=True raises NotImplementedError first",
        hazard_fixed_in="2.14.1",
    ),
    "FSD004": Scenario(
        program="fsd004_summon_rank0_only_writeback.py",
        hazard="NotImplementedError: writeback=True and rank0_only=True is not supported yet",
        errors=(r"NotImplementedError: writeback=True and rank0_only=True is not supported yet",),
    ),
    "FSD005": Scenario(
        program="fsd005_summon_rank0_only_edit.py",
        fixed_by=((
            "with FSDP.summon_full_params(model, rank0_only=True, writeback=False):",
            "with FSDP.summon_full_params(model):",
        ),),
        hazard="after the block, some ranks' shards carry the edit and others do not (ranks diverge)",
        min_ranks=2,
        ranks_why="ranks can only diverge from a peer",
    ),
    "FSD006": Scenario(
        program="fsd006_summon_offload_to_cpu_without_rank0_only.py",
        hazard="inside the block every rank's host memory grows by at least half the full model's size "
        "(measured from /proc/self/statm); with rank0_only=True only rank 0's does",
        unsafe_fix=True,
        min_ranks=2,
        ranks_why=NO_SHARD_AT_ONE_RANK + ", where offload_to_cpu=True raises NotImplementedError",
        torch_min={"cpu": "2.14.1"},
        torch_why="on CPU-resident parameters offload_to_cpu=True hits pytorch#188989 (FSD003) before 2.14.1",
    ),
    "FSD007": (
        Scenario(
            program="fsd007_step_inside_summon.py",
            fixed_by=((
                "    with FSDP.summon_full_params(model):\n"
                "        loss = model(batch).sum()\n"
                "        loss.backward()\n",
                "    loss = model(batch).sum()\n"
                "    loss.backward()\n"
                "    with FSDP.summon_full_params(model):\n"
                "        loss = loss + 0 * sum(p.sum() for p in model.parameters())\n",
            ),),
            hazard="AssertionError at exit (use_orig_params=False), or weights changed with no optimizer step",
            errors=(r"AssertionError: Expects tensor to be unsharded",),
            min_ranks=2,
            ranks_why=NO_SHARD_AT_ONE_RANK + ": the parameters are never sharded",
        ),
        Scenario(
            program="fsd007_generate_inside_summon.py",
            form="generate",
            unsafe_fix=True,  # the rule's own fix: ``recurse=False``
            hazard="AssertionError at the summon's exit: the nested units' forward ran on the summoned parameters",
            errors=(r"AssertionError: Expects tensor to be unsharded",),
            min_ranks=2,
            ranks_why=NO_SHARD_AT_ONE_RANK + ": the parameters are never sharded",
        ),
    ),
    "FSD008": Scenario(
        program="fsd008_summon_in_forward.py",
        fixed_by=(
            ("    net[0].register_forward_hook(log_norms)\n", ""),
            ("    _harness.report(", "    log_norms(model, None, None)  # after the forward, not as a hook\n    _harness.report("),
        ),
        hazard="AssertionError: Cannot manually unshard parameters during forward/backward",
        errors=(r"Cannot manually unshard parameters during forward/backward",),
    ),
    "FSD009": Scenario(
        program="fsd009_summon_with_grads_unsupported.py",
        fixed_by=((
            "model = FSDP(_harness.mlp(), device_id=where)",
            "model = FSDP(_harness.mlp(), device_id=where, use_orig_params=True)",
        ),),
        hazard="NotImplementedError: with_grads=..., use_orig_params=..., offload_to_cpu=... is not supported yet",
        errors=(r"NotImplementedError: with_grads=True, use_orig_params=\w+, offload_to_cpu=\w+ is not supported",),
    ),
    "FSD010": (
        Scenario(
            program="fsd010_summon_offload_to_cpu_no_shard.py",
            hazard="NotImplementedError: offload_to_cpu=True and NO_SHARD is not supported yet",
            errors=(r"NotImplementedError: offload_to_cpu=True and NO_SHARD is not supported yet",),
            unsafe_fix=True,
        ),
        Scenario(
            program="fsd010_state_dict_offload_to_cpu_no_shard.py",
            form="state-dict",
            lint_target="2.0",
            fixed_by=((
                "FullStateDictConfig(offload_to_cpu=True, rank0_only=True)",
                "FullStateDictConfig(rank0_only=True)",
            ),),
            hazard="NotImplementedError: offload_to_cpu=True and NO_SHARD is not supported yet, from "
            "state_dict() under FullStateDictConfig(offload_to_cpu=True) (torch < 2.1)",
            errors=(r"NotImplementedError: offload_to_cpu=True and NO_SHARD is not supported yet",),
            hazard_fixed_in="2.1",
        ),
    ),
    "FSD011": Scenario(
        program="fsd011_summon_on_fully_shard.py",
        fixed_by=((
            "    with FSDP.summon_full_params(model, writeback=False):\n"
            "        seen = [tuple(p.to_local().shape) if hasattr(p, \"to_local\") else tuple(p.shape) for p in model.parameters()]\n",
            "    seen = [tuple(p.full_tensor().shape) for p in model.parameters()]\n",
        ),),
        hazard="inside the block the parameters are still sharded DTensors (local shape differs from the full shape)",
        min_ranks=2,
        ranks_why="on one rank a shard is the whole parameter",
    ),
    "FSD012": Scenario(
        program="fsd012_summon_not_entered.py",
        fixed_by=((
            "    FSDP.summon_full_params(model, writeback=False)\n"
            "    seen = [tuple(p.shape) for p in model.parameters()]\n",
            "    with FSDP.summon_full_params(model, writeback=False):\n"
            "        seen = [tuple(p.shape) for p in model.parameters()]\n",
        ),),
        hazard="after the call the parameters are still sharded (shapes differ from the full ones)",
        min_ranks=2,
        ranks_why=NO_SHARD_AT_ONE_RANK + ": the parameters are never sharded",
    ),
    "FSD101": (
        Scenario(
            program="fsd101_optimizer_before_wrap.py",
            fixed_by=((
                "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                "    model = FSDP(model, device_id=where)\n",
                "    model = FSDP(model, device_id=where)\n"
                "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n",
            ),),
            hazard="after optimizer steps with non-zero gradients the model's weights have not changed",
        ),
        Scenario(
            program="fsd101_accelerate_optimizer_before_prepare.py",
            form="accelerate",
            packages=ACCELERATE,
            fixed_by=((
                "    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)\n"
                "    model, optimizer = accelerator.prepare(model, optimizer)\n",
                "    model = accelerator.prepare(model)\n"
                "    optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=0.01))\n",
            ),),
            hazard="accelerator.prepare(model, optimizer) with FullyShardedDataParallelPlugin(use_orig_params=False): "
            "after optimizer steps with non-zero gradients the model's weights have not changed",
            devices=("cuda",),
            not_on={"cpu": ACCELERATE_FSDP_NEEDS_AN_ACCELERATOR},
        ),
        Scenario(
            program="fsd101_fabric_fsdp2_optimizer_before_setup.py",
            form="fabric-fsdp2",
            packages=LIGHTNING,
            fixed_by=((
                "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                "    model, optimizer = fabric.setup(model, optimizer)\n",
                "    model = fabric.setup_module(model)\n"
                "    optimizer = fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.1))\n",
            ),),
            hazard="fabric.setup(model, optimizer) with ModelParallelStrategy (fully_shard in parallelize_fn): "
            "after optimizer steps with non-zero gradients the model's weights have not changed",
        ),
    ),
    "FSD102": Scenario(
        program="fsd102_clip_grad_norm_on_sharded_fsdp.py",
        hazard="the ranks compute different gradient norms (each its local shard's) and clip differently",
        unsafe_fix=True,
        min_ranks=2,
        ranks_why="with one rank the local norm is the global norm",
    ),
    "FSD103": Scenario(
        program="fsd103_move_after_cpu_offload_wrap.py",
        fixed_by=((
            "    model = FSDP(_harness.mlp(), cpu_offload=CPUOffload(offload_params=True))\n"
            "    model = model.cuda()\n",
            "    model = FSDP(_harness.mlp(), cpu_offload=CPUOffload(offload_params=True), device_id=local_rank)\n",
        ),),
        hazard="RuntimeError at the first forward: parameters on cuda with CPU offloading enabled",
        errors=(r"FSDP-managed module with parameter CPU offloading enabled has parameters on",),
        devices=("cuda",),
        real_cpu_offload=True,
    ),
    "FSD104": (
        Scenario(
            program="fsd104_collective_on_one_rank.py",
            fixed_by=((
                "    if dist.get_rank() == 0:\n"
                "        state = model.state_dict()\n",
                "    state = model.state_dict()\n"
                "    if dist.get_rank() == 0:\n",
            ),),
            hazard=HANG,
            hang_is_hazard=True,
            errors=HANG_ERRORS,
            min_ranks=2,
            ranks_why=ONE_RANK_HANG,
            timeout=60.0,
        ),
        Scenario(
            program="fsd104_load_state_dict_on_one_rank.py",
            form="load",
            fixed_by=((
                "    if dist.get_rank() == 0:\n"
                "        model.load_state_dict(state)\n",
                "    model.load_state_dict(state)\n"
                "    if dist.get_rank() == 0:\n",
            ),),
            hazard="load_state_dict into the FSDP1 module on rank 0 only: " + HANG,
            hang_is_hazard=True,
            errors=HANG_ERRORS,
            min_ranks=2,
            ranks_why=ONE_RANK_HANG,
            timeout=60.0,
        ),
        Scenario(
            program="fsd104_forward_on_one_rank.py",
            form="forward",
            fixed_by=((
                "        if dist.get_rank() == 0:\n"
                "            loss = model(torch.randn(8, 64, device=where)).pow(2).mean()\n",
                "        loss = model(torch.randn(8, 64, device=where)).pow(2).mean()\n"
                "        if dist.get_rank() == 0:\n",
            ),),
            hazard="an evaluation forward of the FSDP1 module on rank 0 only (it all-gathers the parameters): " + HANG,
            hang_is_hazard=True,
            errors=HANG_ERRORS,
            min_ranks=2,
            ranks_why=ONE_RANK_HANG,
            timeout=60.0,
        ),
        Scenario(
            program="fsd104_forward_fsdp2_on_one_rank.py",
            form="forward-fsdp2",
            fixed_by=((
                "        if dist.get_rank() == 0:\n"
                "            loss = model(torch.randn(8, 64, device=where)).pow(2).mean()\n",
                "        loss = model(torch.randn(8, 64, device=where)).pow(2).mean()\n"
                "        if dist.get_rank() == 0:\n",
            ),),
            hazard="an evaluation forward on rank 0 only of a model sharded with fully_shard layer by layer: " + HANG,
            hang_is_hazard=True,
            errors=HANG_ERRORS,
            min_ranks=2,
            ranks_why=ONE_RANK_HANG,
            timeout=60.0,
        ),
        Scenario(
            program="fsd104_accelerate_state_dict_on_main_process.py",
            form="accelerate",
            packages=ACCELERATE,
            fixed_by=((
                "    if accelerator.is_main_process:\n"
                "        state = accelerator.get_state_dict(model)\n",
                "    state = accelerator.get_state_dict(model)\n"
                "    if accelerator.is_main_process:\n",
            ),),
            hazard="accelerator.get_state_dict(model) under FSDP1 on the main process only: " + HANG,
            hang_is_hazard=True,
            errors=HANG_ERRORS,
            devices=("cuda",),
            not_on={"cpu": ACCELERATE_FSDP_NEEDS_AN_ACCELERATOR},
            min_ranks=2,
            ranks_why=ONE_RANK_HANG,
            timeout=60.0,
        ),
        Scenario(
            program="fsd104_fabric_save_on_rank_zero.py",
            form="fabric",
            packages=LIGHTNING,
            fixed_by=((
                "    if fabric.global_rank == 0:\n"
                "        fabric.save(path, {\"model\": model})\n",
                "    fabric.save(path, {\"model\": model})\n",
            ),),
            hazard="fabric.save(...) with strategy=\"fsdp\" on global rank 0 only: " + HANG,
            hang_is_hazard=True,
            errors=HANG_ERRORS,
            devices=("cuda",),
            not_on={"cpu": FABRIC_FSDP_NEEDS_A_GPU},
            min_ranks=2,
            ranks_why=ONE_RANK_HANG,
            timeout=60.0,
        ),
        Scenario(
            program="fsd104_fabric_fsdp2_save_on_rank_zero.py",
            form="fabric-fsdp2",
            packages=LIGHTNING,
            fixed_by=((
                "    if fabric.global_rank == 0:\n"
                "        fabric.save(path, {\"model\": model})\n",
                "    fabric.save(path, {\"model\": model})\n",
            ),),
            hazard="fabric.save(...) with ModelParallelStrategy (FSDP2) on global rank 0 only: " + HANG,
            hang_is_hazard=True,
            errors=HANG_ERRORS,
            min_ranks=2,
            ranks_why=ONE_RANK_HANG,
            timeout=60.0,
        ),
    ),
    "FSD105": (
        Scenario(
            program="fsd105_generate_outside_summon.py",
            min_ranks=2,
            ranks_why="with one rank FSDP switches to NO_SHARD and the root's parameters stay whole",
            fixed_by=((
                "    tokens = model.generate(prompt, max_new_tokens=4)\n",
                "    with FSDP.summon_full_params(model, writeback=False, recurse=False):\n"
                "        tokens = model.generate(prompt, max_new_tokens=4)\n",
            ),),
            hazard="generate fails on the flattened, sharded root parameters ('weight' must be 2-D / setStorage)",
            errors=_FSD105_ERRORS,
        ),
        Scenario(
            program="fsd105_model_method_outside_summon.py",
            form="method",
            min_ranks=2,
            ranks_why="with one rank FSDP switches to NO_SHARD and the root's parameters stay whole",
            fixed_by=((
                "    velocity = model.forward_train(points)\n",
                "    with FSDP.summon_full_params(model, writeback=False, recurse=False):\n"
                "        velocity = model.forward_train(points)\n",
            ),),
            hazard="the model's own method fails on the flattened, sharded root parameters (setStorage / shapes)",
            errors=_FSD105_ERRORS,
        ),
    ),
    "FSD106": (
        Scenario(
            program="fsd106_grad_norm_read_per_rank.py",
            min_ranks=2,
            ranks_why="one rank holds the whole gradient: its local norm is the global one",
            hazard="the ranks read different gradient norms (a local shard's norm instead of the global one)",
            unsafe_fix=True,
        ),
        Scenario(
            program="fsd106_grad_norm_formatted.py",
            form="format",
            hazard="formatting the DTensor norm with a spec raises TypeError at the log line",
            errors=(r"unsupported format string passed to DTensor\.__format__",),
            unsafe_fix=True,
        ),
    ),
    "FSD107": Scenario(
        program="fsd107_cast_after_wrap.py",
        fixed_by=((
            "    model.to(torch.bfloat16)\n"
            "    state = model.state_dict()\n",
            "    state = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}\n",
        ),),
        hazard="the cast wrapped model fails in its state-dict hooks or its next forward (dtype mismatch)",
        errors=(
            r"Invalid usage of tensors with different dtypes",
            r"mat1 and mat2 must have the same dtype",
            r"Expected out tensor to have dtype",
            # NCCL (2x H200, torch 2.11): the all-gather of the cast parameters
            r"output tensor must have the same type as input tensor",
            r"Expects the handle training to be IDLE",
        ),
        min_ranks=2,
        ranks_why=NO_SHARD_AT_ONE_RANK + ": the state dict all-gathers nothing, so the cast shard never meets "
        "FSDP's full-precision gather buffer (measured: clean on 1 rank, CPU 2.13.0 and 1 GPU 2.11)",
    ),
    "FSD108": Scenario(
        program="fsd108_save_on_every_rank.py",
        min_ranks=2,
        ranks_why="one rank writes the only save",
        fixed_by=((
            '    path = os.path.join(out_dir, "model.pt")\n',
            '    path = os.path.join(out_dir, f"model_rank{rank}.pt")\n',
        ),),
        hazard="the saved file holds one rank's data only (the other ranks' saves are lost) or does not load",
    ),
    "FSD109": Scenario(
        program="fsd109_no_sync_on_fully_shard.py",
        fixed_by=((
            "        if i < len(batches) - 1:\n"
            "            with model.no_sync():\n"
            "                model(batch).sum().backward()\n"
            "        else:\n"
            "            model(batch).sum().backward()\n",
            "        model.set_requires_gradient_sync(i == len(batches) - 1)\n"
            "        model(batch).sum().backward()\n",
        ),),
        hazard="AttributeError: the FSDP2 module has no attribute 'no_sync'",
        errors=(r"AttributeError: '\w+' object has no attribute 'no_sync'",),
    ),
    "FSD110": Scenario(
        program="fsd110_plain_state_dict_into_fully_shard.py",
        fixed_by=((
            "    model.load_state_dict(torch.load(path))\n",
            "    set_model_state_dict(model, torch.load(path), options=StateDictOptions(full_state_dict=True))\n",
        ),),
        hazard="RuntimeError: Error(s) in loading state_dict (full tensors into DTensor shards), or the values not loaded",
        errors=(r"RuntimeError: Error\(s\) in loading state_dict", r"got mixed torch\.Tensor and DTensor"),
        min_ranks=2,
        ranks_why="on one rank a shard is the whole parameter",
    ),
    "FSD111": Scenario(
        program="fsd111_deepcopy_of_sharded_model.py",
        fixed_by=((
            "    fully_shard(model, mesh=mesh)\n"
            "    ema = copy.deepcopy(model)\n",
            "    ema = copy.deepcopy(model)\n"
            "    fully_shard(model, mesh=mesh)\n"
            "    fully_shard(ema, mesh=mesh)\n",
        ),),
        hazard="AssertionError: FSDP does not support deepcopy",
        errors=(r"FSDP does not support deepcopy",),
    ),
    "FSD112": Scenario(
        program="fsd112_rank0_save_of_sharded_state_dict.py",
        fixed_by=((
            "    if rank == 0:\n"
            "        torch.save(model.state_dict(), path)\n",
            "    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))\n"
            "    if rank == 0:\n"
            "        torch.save(state, path)\n",
        ),),
        hazard="the checkpoint saved on rank 0 holds rank 0's DTensor shards only (local shapes smaller than the parameters)",
        min_ranks=2,
        ranks_why="on one rank a shard is the whole parameter",
    ),
    "FSD113": Scenario(
        program="fsd113_weights_already_in_param_dtype.py",
        fixed_by=(("    model = model.to(torch.bfloat16)\n", ""),),
        hazard="the sharded parameters and the optimizer state are bfloat16 (the policy's fp32 master weights do not exist)",
    ),
    "FSD114": Scenario(
        program="fsd114_forward_method_not_registered.py",
        fixed_by=((
            "    fully_shard(model, mesh=mesh)\n",
            "    fully_shard(model, mesh=mesh)\n"
            "    register_fsdp_forward_method(model, \"encode\")\n",
        ),),
        hazard="RuntimeError: got mixed torch.Tensor and DTensor (the root's own parameters are still sharded "
        "DTensors in a method other than forward)",
        errors=(r"got mixed torch\.Tensor and DTensor",),
    ),
    "FSD115": Scenario(
        program="fsd115_root_without_mixed_precision.py",
        fixed_by=(("    fully_shard(model, mesh=mesh)\n", "    fully_shard(model, mesh=mesh, mp_policy=policy)\n"),),
        hazard="the root's own modules (final norm, output head) compute in float32 on the layers' bfloat16 "
        "activations (float32 logits), or a dtype mismatch RuntimeError where a root module meets a layer's output",
        errors=(r"expected m1 and m2 to have the same dtype", r"mat1 and mat2 must have the same dtype"),
    ),
    "FSD116": Scenario(
        program="fsd116_param_edit_between_unshard_reshard.py",
        fixed_by=((
            "    model.unshard()\n"
            "    with torch.no_grad():\n"
            "        for p in model.parameters():\n"
            "            p.mul_(0.5)\n"
            "    model.reshard()\n",
            "    with torch.no_grad():\n"
            "        for p in model.parameters():\n"
            "            p.mul_(0.5)\n",
        ),),
        hazard="the local shards keep their old values after reshard() (the edit made to the unsharded parameters "
        "is discarded)",
    ),
    "FSD117": (Scenario(
        program="fsd117_to_empty_without_init.py",
        fixed_by=((
            "    model.to_empty(device=device)\n",
            "    model.to_empty(device=device)\n"
            "    for layer in model.modules():\n"
            "        if isinstance(layer, torch.nn.Linear):\n"
            "            layer.reset_parameters()\n",
        ),),
        hazard="after to_empty the parameters are uninitialised memory (values outside nn.Linear's init range, "
        "non-finite or all zero)",
    ), Scenario(
        program="fsd117_init_on_one_rank.py",
        form="one-rank",
        fixed_by=((
            "    if dist.get_rank() == 0:\n"
            "        for layer in model.modules():\n"
            "            if isinstance(layer, torch.nn.Linear):\n"
            "                layer.reset_parameters()\n",
            "    for layer in model.modules():\n"
            "        if isinstance(layer, torch.nn.Linear):\n"
            "            layer.reset_parameters()\n",
        ),),
        hazard="the re-initialisation under a rank test fills that rank's shards only: another rank's shards "
        "stay uninitialised memory (values outside nn.Linear's init range, non-finite or all zero)",
        min_ranks=2,
        ranks_why="with one rank, rank 0's re-initialisation covers every shard",
    )),
    "FSD118": Scenario(
        program="fsd118_tied_parameters_in_separate_groups.py",
        fixed_by=((
            "    fully_shard(model.embed, mesh=mesh)\n"
            "    fully_shard(model.lm_head, mesh=mesh)\n",
            "    fully_shard([model.embed, model.lm_head], mesh=mesh)\n",
        ),),
        hazard="ValueError at the first forward: the tied parameter is managed by two FSDP groups "
        "(torch <= 2.11: no error, the tie is broken after training)",
        errors=(r"ValueError: Parameter '[\w.]+' is shared with a parameter already managed by another FSDP group",),
    ),
    "FSD119": Scenario(
        program="fsd119_root_forward_before_optimizer.py",
        fixed_by=((
            "    with torch.no_grad():\n"
            "        model(batch)\n"
            "    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)\n",
            "    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)\n"
            "    with torch.no_grad():\n"
            "        model(batch)\n",
        ),),
        hazard="the optimizer holds the root's unsharded plain tensors: the root's sharded parameters are unchanged "
        "by the training steps",
    ),
}

def variants(code: str) -> Tuple[Scenario, ...]:
    """Every scenario declared for ``code``, all forms (empty: the rule has none)."""
    entry = SCENARIOS.get(code)
    if entry is None:
        return ()
    return entry if isinstance(entry, tuple) else (entry,)


def forms(code: str) -> Tuple[str, ...]:
    """The forms of ``code``'s scenario in declaration order (``""``: the plain torch one)."""
    found: List[str] = []
    for scenario in variants(code):
        if scenario.form not in found:
            found.append(scenario.form)
    return tuple(found)


def scenario_for(code: str, device: str, form: str = "") -> Optional[Scenario]:
    """The variant of ``code``'s scenario ``form`` that runs on ``device`` (else the form's
    first variant, whose ``cannot_run`` says why it is skipped); None when there is none."""
    found = [s for s in variants(code) if s.form == form]
    for scenario in found:
        if device in scenario.devices:
            return scenario
    return found[0] if found else None


def scenarios_for(code: str, device: str) -> List[Scenario]:
    """One scenario per form of ``code``, each the variant for ``device``: what ``verify`` runs."""
    return [s for s in (scenario_for(code, device, form) for form in forms(code)) if s is not None]
