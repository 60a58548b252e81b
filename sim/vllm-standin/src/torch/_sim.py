"""What the torch stand-in reads of the spark-sim node: its driver for CUDA's initialisation, its fabric for the
all-reduce's time. The same files the node's other stand-ins read (world-readable): the state JSON
(``SPARK_SIM_STATE``, default /var/lib/spark-sim/state.json; sparksim/state.py) and the installed userspace
driver (``SPARK_SIM_DRIVER_USERSPACE``, default /var/lib/spark-sim/driver-userspace-version; sparksim/gpu.py).

CUDA (cudaGetDeviceCount, hence cuInit in the driver's libcuda), as ``cuda_error`` returns it (cudaError, text):

- no kernel module loaded (``gpu.driver_loaded`` false): no device for the driver (cudaErrorNoDevice, 100):
  torch counts 0 and ``torch.cuda.init()`` raises "No CUDA GPUs are available" (the worst case: a real node may
  report another code; every one of them fails the check);
- the loaded module differs from the userspace (``gpu.driver_version`` vs the file, what nvidia-smi calls
  "Driver/library version mismatch"; no file: no userspace recorded, no mismatch, as the nvidia-smi stand-in
  reads it): cudaErrorSystemDriverMismatch (803), "system has unsupported display driver / cuda driver
  combination" (cuda.h CUDA_ERROR_SYSTEM_DRIVER_MISMATCH; the text as libcuda reports it in logs);
- nvidia-uvm not loaded (``gpu.uvm_loaded`` false, the ``nvidia-uvm-missing`` fault): cudaErrorUnknown (999):
  nvidia-smi answers, CUDA does not (public reports: gorgonia/cu#2 "cu.init return Unknown" with nvidia-smi
  working, fixed by ``modprobe nvidia_uvm``; ggml-org/llama.cpp#7218; Bumblebee-Project/Bumblebee#623).

The all-reduce's bus bandwidth (GB/s, 1e9 bytes/s, nccl-tests' unit), per node (the collective runs at the
slowest node's figure):

- healthy: 23.19 GB/s: unsloth's spark doctor measured ~21.6 GiB/s on a healthy pair (1 GiB, its busbw divides
  by 2**30: 21.6 * 2**30 / 1e9), 88% of the 24.5 GB/s raw RDMA ceiling (studio/spark_cluster.py, unsloth PR #10280);
- the node's power-delivery fault (``nic.power_degraded``, the ``nccl-power-degraded`` fault): ~3.0 GiB/s = 3.22
  GB/s while raw RDMA stays healthy (the same source: "Raw RDMA looked healthy (24.5 GB/s) in BOTH states"); a
  reboot does not clear it, only the AC power cycle (here: ``spark-sim fault HOST clear``);
- the node's NIC throttled (``nic.throttled``, the stale initialisation): the ib_write_bw stand-in's 13.1 Gb/s
  per rail at the same 88% efficiency: 13.1 / 8 * 0.88 = 1.44 GB/s.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional, Tuple

DEFAULT_STATE = '/var/lib/spark-sim/state.json'
USERSPACE_FILE = '/var/lib/spark-sim/driver-userspace-version'
HEALTHY_BUSBW = 21.6 * 2 ** 30 / 1e9
POWER_DEGRADED_BUSBW = 3.0 * 2 ** 30 / 1e9
THROTTLED_BUSBW = 13.1 / 8 * 0.88

ERR_NO_DEVICE = 100
ERR_SYSTEM_DRIVER_MISMATCH = 803
ERR_UNKNOWN = 999
ERROR_STRINGS = {
    ERR_NO_DEVICE: 'no CUDA-capable device is detected',
    ERR_SYSTEM_DRIVER_MISMATCH: 'system has unsupported display driver / cuda driver combination',
    ERR_UNKNOWN: 'unknown error',
}


def state() -> Dict[str, Any]:
    try:
        with open(os.environ.get('SPARK_SIM_STATE') or DEFAULT_STATE, encoding='utf-8') as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def userspace_version() -> Optional[str]:
    try:
        with open(os.environ.get('SPARK_SIM_DRIVER_USERSPACE') or USERSPACE_FILE, encoding='utf-8') as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def cuda_error(st: Optional[Dict[str, Any]] = None) -> Tuple[int, str]:
    """(cudaError of cudaGetDeviceCount, its text); (0, '') when CUDA initialises with the GB10."""
    st = state() if st is None else st
    gpu = st.get('gpu') if isinstance(st.get('gpu'), dict) else {}
    userspace = userspace_version()
    if not gpu.get('driver_loaded', True):
        return ERR_NO_DEVICE, ERROR_STRINGS[ERR_NO_DEVICE]
    if userspace and userspace != str(gpu.get('driver_version') or userspace):
        return ERR_SYSTEM_DRIVER_MISMATCH, ERROR_STRINGS[ERR_SYSTEM_DRIVER_MISMATCH]
    if not gpu.get('uvm_loaded', True):
        return ERR_UNKNOWN, ERROR_STRINGS[ERR_UNKNOWN]
    return 0, ''


def device_name(st: Optional[Dict[str, Any]] = None) -> str:
    st = state() if st is None else st
    gpu = st.get('gpu') if isinstance(st.get('gpu'), dict) else {}
    return str(gpu.get('name') or 'NVIDIA GB10')


def busbw(st: Optional[Dict[str, Any]] = None) -> float:
    """This node's all-reduce bus bandwidth in GB/s (the collective runs at the slowest node's)."""
    st = state() if st is None else st
    nic = st.get('nic') if isinstance(st.get('nic'), dict) else {}
    rates = [HEALTHY_BUSBW]
    if nic.get('power_degraded'):
        rates.append(POWER_DEGRADED_BUSBW)
    if nic.get('throttled'):
        rates.append(THROTTLED_BUSBW)
    return min(rates)
