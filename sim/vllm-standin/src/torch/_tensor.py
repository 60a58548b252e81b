"""A uniform tensor: one value for every element (all the entry points need)."""

from __future__ import annotations

from typing import Any, Optional, Union


class dtype:  # noqa: N801 - torch's name
    def __init__(self, name: str, size: int) -> None:
        self.name, self.itemsize = name, size

    def __repr__(self) -> str:
        return 'torch.%s' % self.name


float32 = dtype('float32', 4)


class device:  # noqa: N801 - torch's name
    def __init__(self, kind: Union[str, 'device'], index: Optional[int] = None) -> None:
        if isinstance(kind, device):
            kind, index = kind.type, kind.index
        if ':' in str(kind):
            kind, _, idx = str(kind).partition(':')
            index = int(idx)
        self.type, self.index = str(kind), index

    def __repr__(self) -> str:
        return "device(type='%s'%s)" % (self.type, '' if self.index is None else ', index=%d' % self.index)


class _Scalar:
    def __init__(self, value: float) -> None:
        self.value = value

    def item(self) -> float:
        return self.value

    def __float__(self) -> float:
        return float(self.value)


class Tensor:
    def __init__(self, numel: int, value: float, dt: dtype, dev: device) -> None:
        self._numel, self.value, self.dtype, self.device = int(numel), float(value), dt, dev

    def numel(self) -> int:
        return self._numel

    def element_size(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self._numel * self.dtype.itemsize

    def fill_(self, value: float) -> 'Tensor':
        self.value = float(value)
        return self

    def min(self) -> _Scalar:
        return _Scalar(self.value)

    def max(self) -> _Scalar:
        return _Scalar(self.value)


def _make(size: Any, value: float, dtype_: Optional[dtype], device_: Any) -> Tensor:
    from . import cuda  # pylint: disable=import-outside-toplevel
    dev = device(device_ or 'cpu')
    if dev.type == 'cuda':
        cuda._lazy_init()   # pylint: disable=protected-access
    numel = 1
    for part in (size if isinstance(size, (tuple, list)) else (size,)):
        numel *= int(part)
    return Tensor(numel, value, dtype_ or float32, dev)


def ones(*size: Any, dtype: Optional[dtype] = None, device: Any = None) -> Tensor:  # pylint: disable=redefined-outer-name
    return _make(size[0] if len(size) == 1 else size, 1.0, dtype, device)


def empty(*size: Any, dtype: Optional[dtype] = None, device: Any = None) -> Tensor:  # pylint: disable=redefined-outer-name
    return _make(size[0] if len(size) == 1 else size, 0.0, dtype, device)
