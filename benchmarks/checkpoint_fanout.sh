#!/usr/bin/env bash
# Benchmark (issue 28): the checkpoint fan-out against head-to-each, in one run, on four simulated Sparks behind a
# switch (inventories/sim-switch4) whose fabric egress is limited to the same rate on every node (tc tbf on each
# rail netdev inside each node: what a Spark's link is to the others, one copy at a time at full rate).
#   benchmarks/checkpoint_fanout.sh [-r RATE_MBIT] [-s SHARDS] [-b SHARD_BYTES] [-i INVENTORY] [--down]
# Defaults: 80 Mbit/s, 8 shards of 32 MiB (268 MB: one copy ~27 s at the limit).
# Times the checkpoint role's run onto three wiped workers twice: checkpoint_fanout=false (the head sends to all three
# at once, its egress carries three copies) and true (doubling rounds: head -> w1, then w1 -> w2 and head -> w3), and a
# run with nothing to copy (the role's fixed cost). Exits 1 when the fan-out takes more than 0.75 of head-to-each.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
export PATH="$repo/.venv/bin:$PATH" ANSIBLE_CONFIG="$repo/ansible.cfg"
inv=inventories/sim-switch4 rate=80 shards=8 shard_bytes=33554432 down=0
while [ $# -gt 0 ]; do
  case "$1" in
    -r) rate=$2; shift 2 ;;
    -s) shards=$2; shift 2 ;;
    -b) shard_bytes=$2; shift 2 ;;
    -i) inv=$2; shift 2 ;;
    --down) down=1; shift ;;
    *) echo "usage: $0 [-r RATE_MBIT] [-s SHARDS] [-b SHARD_BYTES] [-i INVENTORY] [--down]" >&2; exit 2 ;;
  esac
done
logs=$(mktemp -d /tmp/checkpoint-fanout.XXXXXX)
pb() { ansible-playbook -i "$inv" benchmarks/checkpoint_fanout.yml "$@"; }
timed() {  # name, extra args: prints seconds
  local name=$1; shift
  local t0 t1
  t0=$(date +%s.%N)
  pb -e bench_phase=sync "$@" > "$logs/$name.log" 2>&1 || { echo "$name run failed: $logs/$name.log" >&2; tail -30 "$logs/$name.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  python3 -c "print('%.1f' % ($t1 - $t0))"
}
sim/spark-sim -i "$inv" up
echo "setup: a ${shards} x ${shard_bytes} B checkpoint on every node (untimed)" >&2
pb -e bench_phase=setup -e bench_shards="$shards" -e bench_shard_bytes="$shard_bytes" > "$logs/setup.log" 2>&1 \
  || { tail -30 "$logs/setup.log" >&2; exit 1; }
trap 'pb -e bench_phase=unshape > "$logs/unshape.log" 2>&1 || true; [ "$down" = 1 ] && sim/spark-sim -i "$inv" down' EXIT
pb -e bench_phase=shape -e bench_rate_mbit="$rate" > "$logs/shape.log" 2>&1 || { tail -30 "$logs/shape.log" >&2; exit 1; }
pb -e bench_phase=wipe > "$logs/wipe1.log" 2>&1
each=$(timed head-to-each -e checkpoint_fanout=false)
pb -e bench_phase=wipe > "$logs/wipe2.log" 2>&1
fan=$(timed fanout -e checkpoint_fanout=true)
noop=$(timed nothing-to-copy -e checkpoint_fanout=true)
rounds=$(grep -o 'spark4-worker[0-9]: round [0-9] of the fan-out, from [^ ]*' "$logs/fanout.log" | sort -u | tr '\n' ';' || true)
python3 - "$each" "$fan" "$noop" "$rate" "$shards" "$shard_bytes" "$rounds" "$logs" <<'PY'
import sys
each, fan, noop = (float(x) for x in sys.argv[1:4])
rate, shards, size = sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
ratio = fan / each
print("checkpoint fan-out, 4 nodes behind a switch, egress %s Mbit/s per node, %d x %d B = %.0f MB" % (rate, shards, size, shards * size / 1e6))
print("  head-to-each (checkpoint_fanout=false)  %7.1f s" % each)
print("  fan-out      (checkpoint_fanout=true)   %7.1f s   (%s)" % (fan, sys.argv[7].strip(";")))
print("  nothing to copy (the role's fixed cost) %7.1f s" % noop)
print("  fan-out / head-to-each = %.2f (ideal 2/3 = 0.67; must be <= 0.75); transfer only: %.2f" % (ratio, (fan - noop) / max(each - noop, 0.1)))
print("  logs: %s" % sys.argv[8])
sys.exit(0 if ratio <= 0.75 else 1)
PY
