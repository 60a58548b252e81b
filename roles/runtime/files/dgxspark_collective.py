# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The runtime's own CUDA and NCCL, measured the way the serving ranks use them (doctor.yml runs it).

    dgxspark_collective.py cuinit
    dgxspark_collective.py allreduce --rank R --world-size N --master-addr A --master-port P
                                     [--size-mb 256] [--warmup 5] [--iters 20] [--timeout 120]

Run with the runtime's Python (the venv's bin/python) as the serving unit's user, in the unit's environment
(its EnvironmentFiles: CUDA, vllm.env, the resolved nccl.env): doctor starts it through systemd-run with the
unit's User=, Group= and EnvironmentFile= lines, so CUDA and NCCL see what a rank sees.

cuinit: CUDA initialised through torch (cudaGetDeviceCount, hence cuInit in the driver's libcuda; no context, no
memory), then the device count and the first device's name. nvidia-smi answering says the kernel module and
NVML work; only this says the runtime's CUDA does (a module/userspace mismatch, a missing nvidia-uvm, a wrong
CUDA_VISIBLE_DEVICES fail here).

allreduce: torch.distributed with the NCCL backend over the unit's environment (NCCL_IB_HCA, the GID index, the
socket interface), every node at once, one rank per node (a Spark has one GPU). A float32 tensor of --size-mb
MiB is all-reduced --warmup times, then --iters times timed (each op synchronised), and checked: a tensor of
ones summed over N ranks reads N everywhere (nccl-tests' #wrong). The figures are nccl-tests' (NVIDIA/nccl-tests
doc/PERFORMANCE.md): algbw = bytes / time per op, busbw = algbw * 2 * (N - 1) / N, in GB/s (1e9 bytes/s).

Prints one JSON line; exit 0 when it measured (or initialised), 1 when a step failed ({"ok": false, "stage":
"cuda" | "init" | "allreduce" | "check", "error": "<the exception's type and first lines>"}), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time


def _error(stage, exc):
    text = ("%s: %s" % (type(exc).__name__, exc)).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return {"ok": False, "stage": stage, "error": " | ".join(lines[:4])[:1500]}


def busbw(nbytes, seconds_per_op, world_size):
    """(algbw, busbw) in GB/s for one all-reduce of ``nbytes`` taking ``seconds_per_op`` over ``world_size`` ranks.

    >>> busbw(1e9, 0.1, 2)
    (10.0, 10.0)
    >>> [round(x, 2) for x in busbw(1e9, 0.1, 4)]
    [10.0, 15.0]
    """
    algbw = nbytes / seconds_per_op / 1e9
    return algbw, algbw * 2.0 * (world_size - 1) / world_size


def cuinit():
    try:
        import torch  # pylint: disable=import-outside-toplevel
    except ImportError as exc:
        return _error("import", exc)
    try:
        torch.cuda.init()
        count = torch.cuda.device_count()
        if count < 1:
            raise RuntimeError("torch.cuda.device_count() is 0 after CUDA initialised")
        name = torch.cuda.get_device_name(0)
    except Exception as exc:  # pylint: disable=broad-except
        out = _error("cuda", exc)
        out["torch"] = getattr(torch, "__version__", "")
        return out
    return {"ok": True, "devices": count, "name": name, "torch": torch.__version__,
            "cuda": getattr(torch.version, "cuda", "") or ""}


def allreduce(args):
    try:
        import torch  # pylint: disable=import-outside-toplevel
        import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    except ImportError as exc:
        return _error("import", exc)
    out = {"rank": args.rank, "world_size": args.world_size, "bytes": args.size_mb << 20, "iters": args.iters,
           "torch": getattr(torch, "__version__", "")}
    try:
        torch.cuda.init()
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
    except Exception as exc:  # pylint: disable=broad-except
        out.update(_error("cuda", exc))
        return out
    try:
        dist.init_process_group("nccl", init_method="tcp://%s:%d" % (args.master_addr, args.master_port),
                                rank=args.rank, world_size=args.world_size,
                                timeout=datetime.timedelta(seconds=args.timeout), device_id=device)
        tensor = torch.ones(args.size_mb << 18, dtype=torch.float32, device=device)   # 4 bytes each
        dist.all_reduce(tensor)      # the communicator's first use: NCCL's transport set up here at the latest
        torch.cuda.synchronize()
    except Exception as exc:  # pylint: disable=broad-except
        out.update(_error("init", exc))
        return out
    try:
        for _warmup in range(args.warmup):
            dist.all_reduce(tensor)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _timed in range(args.iters):
            dist.all_reduce(tensor)
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
    except Exception as exc:  # pylint: disable=broad-except
        out.update(_error("allreduce", exc))
        return out
    try:
        tensor.fill_(1.0)
        dist.all_reduce(tensor)
        torch.cuda.synchronize()
        low, high = float(tensor.min().item()), float(tensor.max().item())
        dist.destroy_process_group()
    except Exception as exc:  # pylint: disable=broad-except
        out.update(_error("check", exc))
        return out
    nccl = getattr(getattr(torch.cuda, "nccl", None), "version", lambda: ())()
    algbw, bus = busbw(out["bytes"], elapsed / args.iters, args.world_size)
    out.update({"ok": True, "time_us": round(elapsed / args.iters * 1e6, 1), "algbw_gbs": round(algbw, 2),
                "busbw_gbs": round(bus, 2), "wrong": 0 if low == high == float(args.world_size) else 1,
                "nccl": ".".join(str(part) for part in nccl) if isinstance(nccl, tuple) else str(nccl)})
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(prog="dgxspark_collective.py", description=__doc__.split("\n\n", 1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("cuinit", help="initialise CUDA through the runtime's torch")
    ar = sub.add_parser("allreduce", help="an NCCL all-reduce between the nodes, timed")
    ar.add_argument("--rank", type=int, required=True)
    ar.add_argument("--world-size", type=int, required=True)
    ar.add_argument("--master-addr", required=True)
    ar.add_argument("--master-port", type=int, required=True)
    ar.add_argument("--size-mb", type=int, default=256)
    ar.add_argument("--warmup", type=int, default=5)
    ar.add_argument("--iters", type=int, default=20)
    ar.add_argument("--timeout", type=int, default=120)
    args = parser.parse_args(argv)
    if args.command == "allreduce" and not (0 <= args.rank < args.world_size and args.size_mb > 0 and args.iters > 0):
        parser.error("expected 0 <= --rank < --world-size, --size-mb > 0 and --iters > 0")
    result = cuinit() if args.command == "cuinit" else allreduce(args)
    print(json.dumps(result, sort_keys=True))
    sys.stdout.flush()
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
