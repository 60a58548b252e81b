#!/usr/bin/env bash
# Quick start on the simulated pair: install what is missing (docker.io,
# debootstrap, the venv), build the node image (cached), bring up the sim pair,
# then run the main job, site.yml, against it.
# Usage: scripts/sim-site.sh [extra ansible-playbook args]   (scripts/sim-down.sh removes the pair)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=scripts/bootstrap.sh
source "$repo/scripts/bootstrap.sh"
"$repo/sim/spark-sim" -i inventories/sim up
exec ansible-playbook site.yml -i inventories/sim "$@"
