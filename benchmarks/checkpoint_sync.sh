#!/usr/bin/env bash
# Run benchmarks/checkpoint_sync.yml against a sim pair where site.yml has run.
#   benchmarks/checkpoint_sync.sh [-i INVENTORY] [ansible-playbook options, e.g. -e bench_bytes=4000000000 -e bench_shards=48]
# Default inventory: inventories/sim (the quick start; scripts/sim-site.sh brings it up).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
export PATH="$repo/.venv/bin:$PATH" ANSIBLE_CONFIG="$repo/ansible.cfg"
args=("$@")
case " ${args[*]-} " in *" -i "*|*" --inventory"*) ;; *) args=(-i inventories/sim "${args[@]}") ;; esac
exec ansible-playbook benchmarks/checkpoint_sync.yml "${args[@]}"
