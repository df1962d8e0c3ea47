"""Qualified names of the torch APIs the rules recognise (no torch import: plain strings)."""

FSDP_PACKAGE = "torch.distributed.fsdp"


def is_fsdp_api(qualname) -> bool:
    """A name of torch's FSDP package (``FSDP.state_dict_type``, ``FullStateDictConfig``,
    ``fully_shard``...): code that calls one works with FSDP modules."""
    return bool(qualname) and qualname.startswith(FSDP_PACKAGE + ".")


FSDP_CLASS = frozenset(
    {
        "torch.distributed.fsdp.FullyShardedDataParallel",
        "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
    }
)
# what ``isinstance(m, ...)`` asks to find a module FSDP wraps: FSDP1's class, FSDP2's
# ``FSDPModule`` (the class ``fully_shard`` gives a module)
FSDP_MODULE_TYPES = FSDP_CLASS | frozenset(
    {
        "torch.distributed.fsdp.FSDPModule",
        "torch.distributed._composable.fsdp.FSDPModule",
        "torch.distributed._composable.fsdp.fully_shard.FSDPModule",
        "torch.distributed.fsdp._fully_shard.FSDPModule",
        "torch.distributed.fsdp._fully_shard._fully_shard.FSDPModule",
    }
)
FULLY_SHARD = frozenset(
    {
        "torch.distributed.fsdp.fully_shard",
        "torch.distributed._composable.fsdp.fully_shard",
        "torch.distributed._composable.fsdp.fully_shard.fully_shard",
        "torch.distributed.fsdp._fully_shard.fully_shard",
        "torch.distributed.fsdp._fully_shard._fully_shard.fully_shard",
    }
)
# ``with enable_wrap(wrapper_cls=FSDP, **cfg): m = wrap(m)``: ``wrap`` builds ``wrapper_cls(m,
# **cfg)`` (torch/distributed/fsdp/wrap.py)
ENABLE_WRAP = frozenset({"torch.distributed.fsdp.wrap.enable_wrap"})
WRAP_FUNCTION = frozenset({"torch.distributed.fsdp.wrap.wrap"})
# FSDP2's ``register_fsdp_forward_method(module, method_name)``
REGISTER_FSDP_FORWARD_METHOD = frozenset(
    {
        "torch.distributed.fsdp.register_fsdp_forward_method",
        "torch.distributed._composable.fsdp.register_fsdp_forward_method",
        "torch.distributed._composable.fsdp.fully_shard.register_fsdp_forward_method",
        "torch.distributed.fsdp._fully_shard.register_fsdp_forward_method",
        "torch.distributed.fsdp._fully_shard._fully_shard.register_fsdp_forward_method",
    }
)
MIXED_PRECISION_POLICY = frozenset(
    {
        "torch.distributed.fsdp.MixedPrecisionPolicy",
        "torch.distributed._composable.fsdp.MixedPrecisionPolicy",
        "torch.distributed.fsdp._fully_shard.MixedPrecisionPolicy",
        "torch.distributed.fsdp._fully_shard._fsdp_api.MixedPrecisionPolicy",
    }
)
CPU_OFFLOAD = frozenset(
    {
        "torch.distributed.fsdp.CPUOffload",
        "torch.distributed.fsdp.api.CPUOffload",
        "torch.distributed.fsdp.fully_sharded_data_parallel.CPUOffload",
    }
)
CPU_OFFLOAD_POLICY = frozenset(
    {
        "torch.distributed.fsdp.CPUOffloadPolicy",
        "torch.distributed._composable.fsdp.CPUOffloadPolicy",
        "torch.distributed.fsdp._fully_shard.CPUOffloadPolicy",
        "torch.distributed.fsdp._fully_shard._fsdp_api.CPUOffloadPolicy",
    }
)
TORCH_DEVICE = frozenset({"torch.device"})
# tests whose answer cannot change while a process runs (the hardware and the build it
# has): ``if torch.cuda.is_available():`` in a setup helper and around a wrap in its caller
# are the same test, whichever function reads it
PROCESS_CONSTANT_TESTS = frozenset(
    {
        "torch.cuda.is_available",
        "torch.backends.mps.is_available",
        "torch.cuda.is_bf16_supported",
        "torch.distributed.is_available",
        "torch.distributed.is_nccl_available",
    }
)
FULL_STATE_DICT_CONFIG = frozenset(
    {
        "torch.distributed.fsdp.FullStateDictConfig",
        "torch.distributed.fsdp.api.FullStateDictConfig",
        "torch.distributed.fsdp.fully_sharded_data_parallel.FullStateDictConfig",
    }
)
STATE_DICT_OPTIONS = frozenset({"torch.distributed.checkpoint.state_dict.StateDictOptions"})
FULL_STATE_DICT_FUNCTIONS = frozenset(
    {
        "torch.distributed.checkpoint.state_dict.get_model_state_dict",
        "torch.distributed.checkpoint.state_dict.get_state_dict",
        "torch.distributed.checkpoint.state_dict.get_optimizer_state_dict",
    }
)
CLIP_GRAD_NORM = frozenset(
    {"torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad.clip_grad_norm_"}
)
NN_MODULE = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})
# writing an object or state dict to a file
TORCH_SAVE = frozenset({"torch.save", "torch.serialization.save"})
SAFETENSORS_SAVE = frozenset({"safetensors.torch.save_file", "safetensors.torch.save_model"})
INIT_PROCESS_GROUP = frozenset({"torch.distributed.init_process_group", "torch.distributed.distributed_c10d.init_process_group"})
# attributes of an FSDP1 wrapper that hold the wrapped (inner, sharded) module
FSDP1_INNER_MODULE = ("module", "_fsdp_wrapped_module")
# what ``torch.nn.Module`` defines (FullyShardedDataParallel is one): on an FSDP1 wrapper
# these run the wrapper's own, ``__getattr__`` hands the inner module's methods only for
# the names the wrapper lacks
NN_MODULE_METHODS = frozenset({
    "add_module", "apply", "bfloat16", "buffers", "children", "compile", "cpu", "cuda", "double", "eval",
    "extra_repr", "float", "forward", "get_buffer", "get_extra_state", "get_parameter", "get_submodule", "half",
    "ipu", "load_state_dict", "modules", "mtia", "named_buffers", "named_children", "named_modules",
    "named_parameters", "parameters", "register_backward_hook", "register_buffer", "register_forward_hook",
    "register_forward_pre_hook", "register_full_backward_hook", "register_full_backward_pre_hook",
    "register_load_state_dict_post_hook", "register_load_state_dict_pre_hook", "register_module",
    "register_parameter", "register_state_dict_post_hook", "register_state_dict_pre_hook", "requires_grad_",
    "set_extra_state", "set_submodule", "share_memory", "state_dict", "to", "to_empty", "train", "type", "xpu",
    "zero_grad",
})
OPTIMIZER_PACKAGE = "torch.optim"
# modules of ``torch.optim`` whose classes take an optimizer, not parameters
OPTIMIZER_WRAPPER_MODULES = ("torch.optim.lr_scheduler.", "torch.optim.swa_utils.")

SUMMON = "summon_full_params"
# summon_full_params(module, recurse=True, writeback=True, rank0_only=False,
#                    offload_to_cpu=False, with_grads=False)   (a staticmethod)
SUMMON_PARAMS = ("module", "recurse", "writeback", "rank0_only", "offload_to_cpu", "with_grads")
SUMMON_DEFAULTS = {
    "recurse": True,
    "writeback": True,
    "rank0_only": False,
    "offload_to_cpu": False,
    "with_grads": False,
}

# FSDP.state_dict_type(module, state_dict_type, state_dict_config=None,
#                      optim_state_dict_config=None)   (a staticmethod, a context manager);
# FSDP.set_state_dict_type takes the same arguments and sets them until changed
STATE_DICT_TYPE_METHODS = frozenset(
    f"{cls}.{name}" for cls in FSDP_CLASS for name in ("state_dict_type", "set_state_dict_type")
)
STATE_DICT_TYPE_PARAMS = ("module", "state_dict_type", "state_dict_config", "optim_state_dict_config")


# the libraries whose FSDP class has a generator-based ``summon_full_params`` context manager
SUMMON_CONTEXT_LIBRARIES = frozenset({"torch", "fairscale", "fairseq", "metaseq"})


def is_summon_qualname(qualname):
    return qualname is not None and any(qualname == f"{cls}.{SUMMON}" for cls in FSDP_CLASS)


# ``torch.distributed``'s collectives by name (``torch.distributed.<name>``): every rank of
# the group must make them (``collectives``), and those handed a tensor or list write the
# group's value into it in place (``ranks``: a value they sync is the same on every rank)
DIST_COLLECTIVES = frozenset(
    {
        "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
        "reduce_scatter_tensor", "broadcast", "broadcast_object_list", "barrier", "monitored_barrier",
        "all_to_all", "all_to_all_single", "reduce", "gather", "gather_object", "scatter", "scatter_object_list",
    }
)
