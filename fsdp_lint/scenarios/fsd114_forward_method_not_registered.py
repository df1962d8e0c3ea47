"""FSD114 scenario: the pattern forward-method-not-registered flags, as a small FSDP program (TODO)."""

import torch

from fsdp_lint.scenarios import _harness


def main():
    rank, _, device, local_rank = _harness.init()
    where = torch.device("cpu") if device == "cpu" else torch.device("cuda", local_rank)
    net = _harness.mlp()
    raise NotImplementedError("TODO: FSD114's scenario; report with _harness.report(hazard=..., detail=...)")
    _harness.finish()


if __name__ == "__main__":
    main()
