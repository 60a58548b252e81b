"""spark-sim stand-in for vLLM: ``vllm serve`` with the real flags, no GPU and no model.

It parses the flags the collection's ``dgxspark.cluster.vllm_serve_argv`` filter
renders (and the other common ``vllm serve`` flags), does the multi-node
rendezvous of the mp backend over TCP (head listens on --master-addr:--master-port,
--headless workers join), then serves the OpenAI API on the head. See README.md.
"""

__version__ = "0.27.1+spark.sim"
__version_tuple__ = (0, 27, 1, "spark", "sim")
