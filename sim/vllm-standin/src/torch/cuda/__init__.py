"""torch.cuda of the stand-in: initialisation as c10/cuda/CUDAFunctions.cpp words it (sources: sim/SOURCES.md).

``is_available()`` never raises: on an error it warns ``CUDA initialization: <message>`` (a UserWarning) and
returns False; ``init()`` (``_lazy_init``) raises RuntimeError with the message alone, and "No CUDA GPUs are
available" when no device is there (``device_count_ensure_non_zero``).
"""

from __future__ import annotations

import warnings
from typing import Any, Optional

from .. import _sim
from . import nccl  # noqa: F401

_initialized = False
_device = 0


def _message(err: int, text: str) -> str:
    if err == _sim.ERR_UNKNOWN:
        return ('CUDA unknown error - this may be due to an incorrectly set up environment, e.g. changing env '
                'variable CUDA_VISIBLE_DEVICES after program start. Setting the available devices to be zero.')
    return ('Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling '
            'NumCudaDevices() that might have already set an error? Error %d: %s' % (err, text))


def _count() -> int:
    """device_count_impl(fail_if_no_driver=false): the count, or raise RuntimeError(message)."""
    err, text = _sim.cuda_error()
    if err == 0:
        return 1
    if err == _sim.ERR_NO_DEVICE:
        return 0
    raise RuntimeError(_message(err, text))


def device_count() -> int:
    try:
        return _count()
    except RuntimeError as exc:
        warnings.warn('CUDA initialization: %s' % exc, UserWarning, stacklevel=2)
        return 0


def is_available() -> bool:
    return device_count() > 0


def _lazy_init() -> None:
    global _initialized  # pylint: disable=global-statement
    if _initialized:
        return
    if _count() == 0:
        raise RuntimeError('No CUDA GPUs are available')
    _initialized = True


def init() -> None:
    _lazy_init()


def is_initialized() -> bool:
    return _initialized


def get_device_name(index: Any = None) -> str:
    _lazy_init()
    return _sim.device_name()


def set_device(dev: Any) -> None:
    global _device  # pylint: disable=global-statement
    _lazy_init()
    index = getattr(dev, 'index', dev)
    index = 0 if index is None else int(index)
    if index != 0:
        raise RuntimeError('CUDA error: invalid device ordinal')
    _device = index


def current_device() -> int:
    _lazy_init()
    return _device


def synchronize(dev: Optional[Any] = None) -> None:
    _lazy_init()
