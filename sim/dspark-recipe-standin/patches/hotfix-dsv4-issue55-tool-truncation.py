# STAND-IN (spark-sim) for the DSpark recipe's patches/hotfix-dsv4-issue55-tool-truncation.py.
# The real one patches vLLM in the image at container start; this one patches nothing:
# it records that it ran (sim/vllm-standin/src/vllm/standin_startup.py).
import os

from vllm.standin_startup import record

record(os.path.basename(__file__))
