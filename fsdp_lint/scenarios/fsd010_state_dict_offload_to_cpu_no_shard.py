"""FSD010 scenario, state-dict form: a full state dict offloaded to the CPU from a NO_SHARD
model.  Before torch 2.1, ``state_dict()`` raised ``NotImplementedError: offload_to_cpu=True
and NO_SHARD is not supported yet`` from the state-dict hook on every rank; from 2.1 the
hooks of a NO_SHARD module replace the configuration with a default ``FullStateDictConfig()``
and the call works (the verifier then says NOT REPRODUCED, the hazard being fixed)."""

import torch
from torch.distributed.fsdp import FullStateDictConfig, FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy, StateDictType

from fsdp_lint.scenarios import _harness


def main():
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    model = FSDP(_harness.mlp(), device_id=where, sharding_strategy=ShardingStrategy.NO_SHARD)
    policy = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, policy):
        state = model.state_dict()
    state = {name: tensor.cpu() for name, tensor in state.items()}
    _harness.report(hazard=False, detail=f"rank {rank} saved {len(state)} tensors")
    _harness.finish()


if __name__ == "__main__":
    main()
