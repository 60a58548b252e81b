"""torch.cuda.nccl.version() of the stand-in: the NCCL the vLLM stand-in models (vllm/nccl.py NCCL_VERSION)."""

from __future__ import annotations

from typing import Tuple

NCCL_VERSION = '2.27.7'


def version() -> Tuple[int, ...]:
    return tuple(int(part) for part in NCCL_VERSION.split('.'))
