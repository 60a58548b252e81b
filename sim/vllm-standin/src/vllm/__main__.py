"""``python -m vllm`` = the ``vllm`` console script."""

import sys

from vllm.cli import main

sys.exit(main())
