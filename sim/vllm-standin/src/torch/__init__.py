"""spark-sim stand-in for the part of torch the collection's own entry points use (no GPU, standard library only).

The vLLM stand-in's wheel carries it because the sim's venv installs no torch (runtime_torch_install: false: no
CUDA torch runs in a container). What exists is what roles/runtime/files/dgxspark_collective.py calls, with
torch's names, types and messages (sources in sim/SOURCES.md, "torch stand-in"):

- ``torch.cuda.init()``, ``is_available()``, ``device_count()``, ``get_device_name()``, ``set_device()``,
  ``synchronize()``: CUDA initialises as cudaGetDeviceCount does against the node's driver as the sim models it
  (``torch/_sim.py``): the loaded module vs the installed userspace (803), nvidia-uvm (999), no module (no device),
  no userspace (no driver), with the messages of c10/cuda/CUDAFunctions.cpp.
- ``torch.ones``/``torch.empty`` of a float32 CUDA tensor (``numel``, ``element_size``, ``fill_``, ``min``,
  ``max``, ``item``): a uniform tensor, one value for every element.
- ``torch.distributed``: ``init_process_group("nccl", init_method="tcp://A:P", ...)``, ``all_reduce``,
  ``barrier``, ``destroy_process_group``: the ranks meet over TCP at the master; NCCL's init is checked against
  the node's live RoCE GID table (the vLLM stand-in's ``vllm.nccl``), and every all-reduce takes the time the
  sim's fabric gives it (``torch/_sim.py``).
"""

from __future__ import annotations

from . import version  # noqa: F401
from ._tensor import Tensor, device, dtype, empty, float32, ones  # noqa: F401
from . import cuda  # noqa: F401
from . import distributed  # noqa: F401

__version__ = version.__version__
