#!/usr/bin/env bash
# Remove the quick-start sim pair (containers and networks), also after a failed run.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
export PATH="$repo/.venv/bin:$PATH"
exec "$repo/sim/spark-sim" -i inventories/sim down
