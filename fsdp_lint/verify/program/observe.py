"""The runtime layer: installed in each torchrun rank before the user's code runs.

It wraps the FSDP APIs the rules are about and appends one JSON line per event to
``<dir>/rank<N>.events.jsonl`` (written at once with ``os.write``, so a rank that hangs or
is killed keeps everything it saw).  Each event carries the user's call site (the first
frame outside torch and fsdp-lint) and the optimizer step it happened in.  Deciding what
the events mean, across ranks, is ``evidence``'s job; this module only measures.

What is observed:
- ``summon_full_params``: every creation, entry, exit and exception, with its options;
  for ``writeback=True`` and ``rank0_only=True`` summons (the checks that copy tensors, on
  by default, ``--no-checksums`` turns them off) the local shard's checksum before entry and
  after exit and whether the block wrote to the full parameters; for ``offload_to_cpu=True``
  whether the full parameters' storage was freed and the host memory growth in the block.
- forward of an FSDP module and ``backward()`` while a summon is active.
- optimizers: creation site; at the first step, parameters that are not the wrapped
  model's current ones; every step (the step counter, ``--steps``).
- ``clip_grad_norm_`` over FSDP1 sharded parameters: this rank's norm.
- collectives called from the user's code (``torch.distributed``, FSDP state dicts,
  summons): which site each rank entered; a SIGTERM (the verifier stopping a hung job) dumps every
  thread's stack (``faulthandler``) to ``rank<N>.stacks.txt``.
- ``.cuda()``/``.to()`` of an FSDP module that offloads its parameters to the CPU.
- any exception that ends the program, with its innermost user frame.

Only the ranks import this module (``_entry.py``, where torch is the user's own), so torch
is imported at the top; the verifier's command side never imports it.
"""

from __future__ import annotations

import faulthandler
import functools
import importlib
import json
import os
import runpy
import signal
import sys
import time
import traceback
import weakref
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist
import torch.nn.utils as nn_utils
import torch.nn.utils.clip_grad as clip_grad
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.optim import Optimizer
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from fsdp_lint.verify.program.signatures import AFTER_FREED_STORAGE, rule_of_exception
from fsdp_lint.verify.program.sites import SiteFinder

try:
    import torch.distributed.checkpoint.state_dict as dcp_state_dict
except Exception:  # noqa: BLE001 - older torch
    dcp_state_dict = None
try:
    from torch.distributed.tensor import DTensor
except Exception:  # noqa: BLE001 - older torch
    DTensor = None
# Where ``fully_shard`` is reached from: not only the defining module, since fully_shard
# looks itself up there (``fully_shard.state``).  An older torch has none of them.
FULLY_SHARD_HOLDERS = []
for _name in ("torch.distributed.fsdp", "torch.distributed.fsdp._fully_shard", "torch.distributed._composable.fsdp"):
    try:
        FULLY_SHARD_HOLDERS.append(importlib.import_module(_name))
    except Exception:  # noqa: BLE001 - an older torch without FSDP2
        continue

SPEC_ENV = "FSDP_LINT_OBSERVE"  # JSON: target, argv, events dir, steps, checksums

COLLECTIVES = (
    "barrier", "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "reduce", "gather", "scatter", "all_to_all", "all_to_all_single",
    "all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list",
)
STATE_DICT_FUNCTIONS = ("get_model_state_dict", "get_optimizer_state_dict", "get_state_dict")
_SUMMON_ARGS = ("module", "recurse", "writeback", "rank0_only", "offload_to_cpu", "with_grads")
_SUMMON_DEFAULTS = {
    "recurse": True, "writeback": True, "rank0_only": False, "offload_to_cpu": False, "with_grads": False,
}
_PROGRAM_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_INT_VIEW = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def _rss_bytes() -> Optional[int]:
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class Layer:
    def __init__(self, folder: str, rank: int, steps: Optional[int], checksums: bool) -> None:
        self.rank = rank
        self.steps_limit = steps
        self.checksums = checksums
        self.step = 0
        self.finder = SiteFinder()
        self.active: List["ObservedSummon"] = []
        self.wrapped: List[weakref.ref] = []  # FSDP1 instances and FSDP2 modules
        self.prewrap: Dict[int, weakref.ref] = {}  # id -> parameter replaced by a wrap
        self.optimizer_sites: Dict[int, Any] = {}
        self.checked_optimizers = set()
        self.sequence: Dict[tuple, int] = {}  # (kind, site) -> entries so far
        self.offload_move_site = None
        self.freed_site = None
        self._fd = os.open(
            os.path.join(folder, f"rank{rank}.events.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644
        )
        self._stacks = open(os.path.join(folder, f"rank{rank}.stacks.txt"), "w")

    # -- recording -------------------------------------------------------------------
    def emit(self, _event: str, **data) -> None:
        data["e"] = _event
        data["step"] = self.step
        data["t"] = time.time()
        os.write(self._fd, (json.dumps(data, default=str) + "\n").encode())

    def next_index(self, kind: str, site) -> int:
        key = (kind, tuple(site) if site else None)
        index = self.sequence.get(key, 0)
        self.sequence[key] = index + 1
        return index

    def exception(self, exc: BaseException, site=None, also=()) -> None:
        if getattr(exc, "_fsdp_lint_seen", False):
            return
        try:
            exc._fsdp_lint_seen = True
        except Exception:  # noqa: BLE001 - some exception types refuse attributes
            pass
        text = f"{type(exc).__name__}: {exc}"
        rule = rule_of_exception(text)
        if site is None:
            site = self.finder.site_of_traceback(exc.__traceback__)
        note = ""
        if rule == "FSD103" and self.offload_move_site:
            also = (*also, site)
            site = self.offload_move_site
            note = f"the module was moved at line {site[1]}"
        if rule is None and self.freed_site and AFTER_FREED_STORAGE.search(text):
            rule, also, site = "FSD003", (*also, site), self.freed_site
            note = f"after the summon at line {site[1]} freed the full parameters' storage"
        self.emit(
            "exception",
            rule=rule,
            site=site,
            also=list(also),
            message=text[:2000],
            note=note,
            traceback=self.format_traceback(exc)[-6000:],
        )

    def format_traceback(self, exc: BaseException) -> str:
        """The exception as Python prints it, without the runtime layer's own frames."""
        frames = [f for f in traceback.extract_tb(exc.__traceback__)
                  if not f.filename.startswith(_PROGRAM_DIR) and not f.filename.startswith("<frozen runpy")]
        lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames)]
        lines += traceback.format_exception_only(type(exc), exc)
        return "".join(lines)

    # -- tensors ---------------------------------------------------------------------
    def checksum(self, tensor) -> Optional[int]:
        if not self.storage_ok(tensor):
            return None
        flat = tensor.detach().reshape(-1)
        if flat.numel() == 0:
            return 0
        bits = flat.view(getattr(torch, _INT_VIEW[flat.element_size()]))
        return int(torch.sum(bits, dtype=torch.int64).item())

    @staticmethod
    def storage_ok(tensor) -> bool:
        """False when the tensor's storage is smaller than its view (freed memory)."""
        try:
            needed = (tensor.storage_offset() + tensor.numel()) * tensor.element_size()
            return tensor.untyped_storage().nbytes() >= needed
        except Exception:  # noqa: BLE001 - a tensor without storage (meta, fake)
            return False

    def fsdp1_handles(self, module, recurse: bool = True):
        units = FSDP.fsdp_modules(module) if recurse else ([module] if isinstance(module, FSDP) else [])
        return [unit._handle for unit in units if getattr(unit, "_handle", None) is not None]

    def current_param_ids(self) -> set:
        ids = set()
        for ref in self.wrapped:
            module = ref()
            if module is not None:
                ids.update(id(p) for p in module.parameters())
        return ids

    def remember_prewrap(self, module) -> None:
        modules = module if isinstance(module, (list, tuple)) else [module]
        for item in modules:
            for param in item.parameters():
                self.prewrap[id(param)] = weakref.ref(param)

    def forget_kept(self, module) -> None:
        """After a wrap: drop what ``remember_prewrap`` holds on parameters the wrap kept
        (an inner unit's, already sharded).  Only replaced parameters stay remembered: a
        weak reference on a live parameter makes ``torch.utils.swap_tensors`` refuse it, so
        FSDP2's ``to_empty()`` after meta-device construction failed under the layer
        ("_apply(): Couldn't swap")."""
        modules = module if isinstance(module, (list, tuple)) else [module]
        for item in modules:
            for param in item.parameters():
                ref = self.prewrap.get(id(param))
                if ref is not None and ref() is param:
                    del self.prewrap[id(param)]

    # -- installation ----------------------------------------------------------------
    def install(self) -> None:
        faulthandler.enable(file=sys.stderr, all_threads=True)
        faulthandler.register(signal.SIGTERM, file=self._stacks, all_threads=True, chain=True)
        self._patch_fsdp1()
        self._patch_fully_shard()
        self._patch_optimizers()
        self._patch_backward()
        self._patch_clip()
        self._patch_collectives()
        self._patch_exit()

    def _patch_fsdp1(self) -> None:
        layer = self
        original_summon = FSDP.__dict__["summon_full_params"].__func__
        original_init = FSDP.__init__
        original_forward = FSDP.forward
        original_state_dict = FSDP.state_dict

        def summon_full_params(*args, **kwargs):
            if not layer.finder.called_from_user(2):
                return original_summon(*args, **kwargs)
            return ObservedSummon(layer, original_summon, args, kwargs, layer.finder.site(2))

        summon_full_params.__doc__ = original_summon.__doc__
        summon_full_params.__wrapped__ = original_summon

        def __init__(self, module, *args, **kwargs):
            layer.remember_prewrap(module)
            original_init(self, module, *args, **kwargs)
            layer.forget_kept(self)
            layer.wrapped.append(weakref.ref(self))

        def forward(self, *args, **kwargs):
            if layer.active:
                layer.in_summon("forward", layer.finder.site(2))
            return original_forward(self, *args, **kwargs)

        def state_dict(self, *args, **kwargs):
            if layer.finder.called_from_user(2):
                layer.collective("state_dict", layer.finder.site(2))
            return original_state_dict(self, *args, **kwargs)

        def move(name):
            original = getattr(FSDP, name)

            def moved(self, *args, **kwargs):
                result = original(self, *args, **kwargs)
                if layer.finder.called_from_user(2) and getattr(self, "cpu_offload", None) is not None:
                    if self.cpu_offload.offload_params:
                        layer.emit("offload_move", site=layer.finder.site(2), api=name)
                        on = sorted({str(p.device) for p in self.parameters() if p.device.type != "cpu"})
                        if on:
                            site = layer.finder.site(2)
                            layer.offload_move_site = site
                            layer.emit(
                                "hazard", rule="FSD103", site=site,
                                evidence=f"`.{name}()` moved parameters to {', '.join(on)} of a module wrapped with "
                                "CPUOffload(offload_params=True)",
                            )
                return result

            return moved

        FSDP.summon_full_params = staticmethod(summon_full_params)
        FSDP.__init__ = __init__
        FSDP.forward = forward
        FSDP.state_dict = state_dict
        FSDP.cuda = move("cuda")
        FSDP.to = move("to")
        for name in ("full_optim_state_dict", "optim_state_dict", "sharded_optim_state_dict"):
            self._wrap_static_collective(FSDP, name)

    def _wrap_static_collective(self, owner, name) -> None:
        raw = owner.__dict__.get(name)
        if not isinstance(raw, staticmethod):
            return
        original = raw.__func__
        layer = self

        def wrapper(*args, **kwargs):
            if layer.finder.called_from_user(2):
                layer.collective(name, layer.finder.site(2))
            return original(*args, **kwargs)

        setattr(owner, name, staticmethod(wrapper))

    def _patch_fully_shard(self) -> None:
        layer = self
        holders = FULLY_SHARD_HOLDERS
        original = next((getattr(m, "fully_shard") for m in holders if hasattr(m, "fully_shard")), None)
        if original is None:
            return

        @functools.wraps(original)  # keeps the attributes contract() set on it (``state``)
        def fully_shard(module, *args, **kwargs):
            layer.remember_prewrap(module)
            result = original(module, *args, **kwargs)
            layer.forget_kept(module)
            for item in module if isinstance(module, (list, tuple)) else [module]:
                layer.wrapped.append(weakref.ref(item))
            return result

        for holder in holders:
            if getattr(holder, "fully_shard", None) is original:
                holder.fully_shard = fully_shard

    def _patch_optimizers(self) -> None:
        layer = self
        original_init = Optimizer.__init__

        def __init__(self, params, defaults, *args, **kwargs):
            original_init(self, params, defaults, *args, **kwargs)
            site = layer.finder.site(2)
            layer.optimizer_sites[id(self)] = site
            layer.emit("optimizer", site=site, kind=type(self).__name__)

        Optimizer.__init__ = __init__
        register_optimizer_step_pre_hook(self._before_step)
        register_optimizer_step_post_hook(self._after_step)

    def _before_step(self, optimizer, args, kwargs) -> None:
        if id(optimizer) in self.checked_optimizers:
            return
        self.checked_optimizers.add(id(optimizer))
        params = [p for group in optimizer.param_groups for p in group["params"]]
        current = self.current_param_ids()
        # FSD101's observation window: this optimizer's first step, after a wrap
        self.emit("first_step", site=self.optimizer_sites.get(id(optimizer)), wrapped=bool(current))
        stale = [
            p for p in params
            if id(p) not in current and id(p) in self.prewrap and self.prewrap[id(p)]() is p
        ]
        if stale and current:
            without_grad = sum(1 for p in stale if p.grad is None)
            self.emit(
                "hazard", rule="FSD101", site=self.optimizer_sites.get(id(optimizer)),
                evidence=f"at the first step, {len(stale)} of {len(params)} optimizer parameters are the module's "
                f"parameters from before FSDP wrapped it, not the wrapped model's ({without_grad} of them have no "
                "gradient, so the step leaves them and the model unchanged)",
            )

    def _after_step(self, optimizer, args, kwargs) -> None:
        self.step += 1
        self.emit("step")
        if self.steps_limit is not None and self.step >= self.steps_limit:
            self.emit("stopped", reason=f"--steps {self.steps_limit} reached")
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    def _patch_backward(self) -> None:
        layer = self
        original = torch.Tensor.backward

        def backward(self, *args, **kwargs):
            if layer.active:
                layer.in_summon("backward", layer.finder.site(2))
            return original(self, *args, **kwargs)

        torch.Tensor.backward = backward
        original_autograd = torch.autograd.backward

        def autograd_backward(*args, **kwargs):
            if layer.active and layer.finder.called_from_user(2):
                layer.in_summon("backward", layer.finder.site(2))
            return original_autograd(*args, **kwargs)

        torch.autograd.backward = autograd_backward

    def in_summon(self, what: str, site) -> None:
        summon = self.active[-1]
        key = (what, tuple(site) if site else None)
        if key in summon.seen_inside:
            return
        summon.seen_inside.add(key)
        summon.inside_sites.append(site)
        self.emit(
            "hazard", rule="FSD007", site=site, summon_site=summon.site,
            evidence=f"{what} of the FSDP model while the `summon_full_params` block at line {summon.site[1]} "
            "was active" if summon.site else f"{what} while a `summon_full_params` block was active",
        )

    def _patch_clip(self) -> None:
        layer = self
        original = clip_grad.clip_grad_norm_

        def clip_grad_norm_(parameters, max_norm, norm_type=2.0, *args, **kwargs):
            if not layer.finder.called_from_user(2):
                return original(parameters, max_norm, norm_type, *args, **kwargs)
            site = layer.finder.site(2)
            params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
            sharded = layer.sharded_fsdp1_param_ids()
            on_shards = sum(1 for p in params if id(p) in sharded)
            total = original(params, max_norm, norm_type, *args, **kwargs)
            data = {"index": layer.next_index("clip", site), "sharded": on_shards, "count": len(params)}
            if on_shards:
                data.update(norm=float(total), norm_type=float(norm_type))
            layer.emit("clip", site=site, **data)
            return total

        clip_grad_norm_.__wrapped__ = original
        clip_grad.clip_grad_norm_ = clip_grad_norm_
        nn_utils.clip_grad_norm_ = clip_grad_norm_

    def sharded_fsdp1_param_ids(self) -> set:
        world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
        ids = set()
        if world < 2:
            return ids
        for ref in self.wrapped:
            unit = ref()
            if isinstance(unit, FSDP) and unit._handle is not None and unit._handle.uses_sharded_strategy:
                ids.update(id(p) for p in unit.parameters())
        return ids

    def collective(self, api: str, site) -> None:
        self.emit("collective", api=api, site=site, index=self.next_index("collective", site))

    def _patch_collectives(self) -> None:
        layer = self
        for name in COLLECTIVES:
            original = getattr(dist, name, None)
            if original is None:
                continue

            def make(original, name):
                def wrapper(*args, **kwargs):
                    if layer.finder.called_from_user(2):
                        layer.collective(name, layer.finder.site(2))
                    return original(*args, **kwargs)

                wrapper.__wrapped__ = original
                wrapper.__name__ = name
                wrapper.__doc__ = original.__doc__
                return wrapper

            setattr(dist, name, make(original, name))
        if dcp_state_dict is None:
            return
        for name in STATE_DICT_FUNCTIONS:
            original = getattr(dcp_state_dict, name, None)
            if original is None:
                continue

            def make_sd(original, name):
                def wrapper(*args, **kwargs):
                    if layer.finder.called_from_user(2):
                        layer.collective(name, layer.finder.site(2))
                    return original(*args, **kwargs)

                wrapper.__wrapped__ = original
                return wrapper

            setattr(dcp_state_dict, name, make_sd(original, name))

    def _patch_exit(self) -> None:
        original = os._exit
        layer = self

        def _exit(code):
            layer.emit("exit", code=code, how="os._exit")
            original(code)

        os._exit = _exit


class ObservedSummon:
    """Stands in for the context manager ``summon_full_params`` returns, and measures it."""

    def __init__(self, layer: Layer, original, args, kwargs, site) -> None:
        self.layer = layer
        self.original = original
        self.args = args
        self.kwargs = kwargs
        self.site = site
        options = dict(_SUMMON_DEFAULTS)
        options.update(zip(_SUMMON_ARGS, args))
        options.update(kwargs)
        self.options = options
        self.entered = False
        self.cm = None
        self.seen_inside = set()
        self.inside_sites: List[Any] = []

    def __del__(self) -> None:
        if not self.entered:
            try:
                self.layer.emit("hazard", rule="FSD012", site=self.site,
                                evidence="the `summon_full_params(...)` context manager was created and never "
                                "entered: nothing was gathered")
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass

    def _options_text(self) -> Dict[str, Any]:
        return {k: bool(v) for k, v in self.options.items() if k != "module"}

    def __enter__(self):
        layer, options = self.layer, self.options
        self.entered = True
        module = options.get("module")
        handles = layer.fsdp1_handles(module, bool(options["recurse"])) if module is not None else []
        self.handles = handles
        self.index = layer.next_index("summon", self.site)
        self.checks = layer.checksums and bool(options["writeback"] or options["rank0_only"]) and bool(handles)
        self.shard_before = [layer.checksum(h.flat_param) for h in handles] if self.checks else None
        self.rss_before = _rss_bytes() if options["offload_to_cpu"] else None
        self.full_bytes = self.host_bytes = 0
        self.rss_inside = None
        self.on_cpu_before = any(h.flat_param.device.type == "cpu" for h in handles)
        # real CPU parameter offload (CPUOffload(offload_params=True) on an accelerator): the
        # shards live in host memory and the writeback on exit copies each rank's slice back
        self.offloaded = [h for h in handles
                          if getattr(h, "_offload_params", False) and getattr(h, "device", None) is not None
                          and h.device.type != "cpu"]
        layer.emit("summon_enter", site=self.site, index=self.index, options=self._options_text(),
                   fsdp1_units=len(handles))
        self.start = time.perf_counter()
        self.cm = self.original(*self.args, **self.kwargs)
        try:
            result = self.cm.__enter__()
        except BaseException as exc:
            layer.exception(exc, self.site)
            raise
        layer.active.append(self)
        self.freed = False
        self.full_before = None
        self.versions = None
        if module is not None and not handles:
            self._check_fsdp2(module)
        if options["offload_to_cpu"] and handles:
            self.freed = not all(layer.storage_ok(h.flat_param) for h in handles)
            if self.freed:
                layer.freed_site = self.site
                layer.emit(
                    "hazard", rule="FSD003", site=self.site,
                    evidence="inside the `offload_to_cpu=True` block the full parameters' storage is freed "
                    "(storage of size 0 behind the parameter views; reading them crashes) (pytorch#188989)",
                )
            self.rss_inside = _rss_bytes()
            if not self.on_cpu_before:
                params = list(module.parameters())
                self.full_bytes = sum(p.numel() * p.element_size() for p in params)
                self.host_bytes = sum(p.numel() * p.element_size() for p in params if p.device.type == "cpu")
        if self.checks and options["writeback"]:
            self.full_before = [layer.checksum(h.flat_param) for h in handles]
            self.versions = [p._version for p in module.parameters()]
        return result

    def _check_fsdp2(self, module) -> None:
        if DTensor is None:
            return
        params = list(module.parameters())
        sharded = [p for p in params if isinstance(p, DTensor) and tuple(p.to_local().shape) != tuple(p.shape)]
        if sharded:
            self.layer.emit(
                "hazard", rule="FSD011", site=self.site,
                evidence=f"`summon_full_params` on a module sharded with FSDP2 `fully_shard`: nothing was gathered, "
                f"{len(sharded)} of {len(params)} parameters are still sharded DTensors inside the block",
            )

    def __exit__(self, exc_type, exc, tb):
        layer, options = self.layer, self.options
        wrote = None
        if self.full_before is not None:
            after = [layer.checksum(h.flat_param) for h in self.handles]
            versions = [p._version for p in options["module"].parameters()]
            wrote = versions != self.versions or any(
                a is not None and b is not None and a != b for a, b in zip(after, self.full_before)
            )
        if self in layer.active:
            layer.active.remove(self)
        exit_start = time.perf_counter()
        try:
            suppressed = self.cm.__exit__(exc_type, exc, tb)
        except BaseException as error:
            if error is not exc:
                sites = self.inside_sites or [self.site]
                layer.exception(error, sites[0], also=sites[1:] + ([self.site] if self.inside_sites else []))
            raise
        exit_seconds = time.perf_counter() - exit_start
        seconds = time.perf_counter() - self.start
        data = {"site": self.site, "index": self.index, "seconds": seconds, "options": self._options_text()}
        if self.checks:
            shard_after = [layer.checksum(h.flat_param) for h in self.handles]
            data["shard_changed"] = shard_after != self.shard_before
            data["wrote"] = wrote
            if options["writeback"] and wrote is False and data["shard_changed"]:
                changed = sum(1 for a, b in zip(shard_after, self.shard_before) if a != b)
                layer.emit(
                    "hazard", rule="FSD001", site=self.site,
                    evidence=f"the local shard changed ({changed} of {len(self.handles)} flat parameters' checksums) "
                    "across a `writeback=True` summon whose block wrote nothing to the parameters",
                )
            elif options["writeback"] and wrote is False and self.offloaded:
                copied = sum(h.flat_param._local_shard.numel() * h.flat_param._local_shard.element_size()
                             for h in self.offloaded)
                layer.emit(
                    "hazard", rule="FSD001", site=self.site,
                    evidence=f"a `writeback=True` summon whose block wrote nothing to the parameters, on "
                    f"{len(self.offloaded)} FSDP unit(s) with CPUOffload(offload_params=True): on exit this rank "
                    f"copied its {copied / 2 ** 20:.2f} MiB slice back into its host-resident shards "
                    f"(the exit took {exit_seconds * 1000:.2f} ms of the block's {seconds * 1000:.2f} ms)",
                )
        if options["offload_to_cpu"] and self.handles and not self.on_cpu_before:
            data["full_bytes"] = self.full_bytes
            data["host_bytes"] = self.host_bytes
            if self.rss_before is not None and self.rss_inside is not None:
                data["host_growth"] = self.rss_inside - self.rss_before
        layer.emit("summon_exit", **data)
        return suppressed


def main() -> int:
    spec = json.loads(os.environ[SPEC_ENV])
    rank = int(os.environ.get("RANK", "0"))
    layer = Layer(spec["dir"], rank, spec.get("steps"), spec.get("checksums", True))
    layer.install()
    layer.emit("start", pid=os.getpid(), world=int(os.environ.get("WORLD_SIZE", "1")))
    target = spec["target"]
    sys.argv = [target] + list(spec.get("argv", []))
    try:
        if spec.get("module"):
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        layer.emit("exit", code=code, how="SystemExit")
        raise
    except BaseException as exc:  # noqa: BLE001 - recorded, printed, and the rank fails
        layer.exception(exc)
        sys.stderr.write(layer.format_traceback(exc))
        layer.emit("exit", code=1, how="exception")
        sys.stderr.flush()
        return 1
    layer.emit("exit", code=0, how="returned")
    return 0
