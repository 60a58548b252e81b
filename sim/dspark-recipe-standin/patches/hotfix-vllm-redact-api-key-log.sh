#!/bin/bash
# STAND-IN (spark-sim) for the DSpark recipe's patches/ script of the same name.
# The real one patches vLLM in the image at container start; this one patches nothing:
# it records that it ran (sim/vllm-standin/src/vllm/standin_startup.py).
exec python3 -m vllm.standin_startup record "${0##*/}" "$@"
