#!/usr/bin/env bash
# Time a no-op re-run of site.yml against a bare fact-gathering play on the same hosts
# (issue #7: the re-run changes nothing and takes at most 4x the bare play).
#   benchmarks/site_noop.sh [-i INVENTORY] [-n RUNS] [--no-profile] [ansible-playbook options for both plays]
# Default inventory: inventories/sim (the quick start; scripts/sim-site.sh brings it up and
# converges it). The pair must be converged: the first site.yml run here must already change
# nothing. Runs RUNS times (default 3), alternating (a) benchmarks/facts.yml (gather_facts:
# true on the spark hosts, same ansible.cfg and connection settings) and (b) site.yml, and
# prints the median of each and their ratio. Then one more site.yml run with the
# ansible.posix profile_tasks and profile_roles callbacks (not timed): the per-role breakdown
# and the top BENCH_TOP (default 15) tasks. A converged pair takes site.yml's fast path (one
# converged call per node, every role ends at its first task); add
# -e '{"preflight_fast_path": false}' to time the full no-op run instead. Exits 1 if a site.yml run changed anything, or
# failed or could not reach a host, on any host (the recap is parsed); the logs stay in
# BENCH_LOG_DIR (default: a new directory under /tmp).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
export PATH="$repo/.venv/bin:$PATH" ANSIBLE_CONFIG="$repo/ansible.cfg"
export ANSIBLE_COLLECTIONS_PATH="$repo/collections" ANSIBLE_FORCE_COLOR=0 ANSIBLE_NOCOLOR=1

runs=3 profile=true args=()
while (($#)); do
  case $1 in
    -n|--runs) runs=$2; shift 2 ;;
    --no-profile) profile=false; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
case " ${args[*]-} " in *" -i "*|*" --inventory"*) ;; *) args=(-i inventories/sim "${args[@]}") ;; esac
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "site_noop: -n wants a positive number of runs, got '$runs'" >&2; exit 2; }
top=${BENCH_TOP:-15}
logs=${BENCH_LOG_DIR:-$(mktemp -d /tmp/site_noop.XXXXXX)}
mkdir -p "$logs"

# recap LOG: check the PLAY RECAP of LOG says changed=0 failed=0 unreachable=0 on every host
recap() {
  python3 - "$1" <<'EOF'
import re, sys
text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
recap = text.rsplit("PLAY RECAP", 1)[-1] if "PLAY RECAP" in text else ""
hosts = re.findall(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", recap, re.M)
bad = [f"{h} changed={c} unreachable={u} failed={f}" for h, _, c, u, f in hosts if (c, u, f) != ("0", "0", "0")]
if not hosts:
    sys.exit(f"no PLAY RECAP in {sys.argv[1]}")
if bad:
    sys.exit("not a no-op: " + ", ".join(bad) + f" (see {sys.argv[1]})")
print(" ".join(f"{h}:ok={o}" for h, o, *_ in hosts))
EOF
}

# timed NAME LOG PLAYBOOK: run PLAYBOOK with the common options, print the seconds it took
timed() {
  local start end rc=0
  start=$(date +%s.%N)
  ansible-playbook "$3" "${args[@]}" >"$2" 2>&1 || rc=$?
  end=$(date +%s.%N)
  if ((rc != 0)); then
    echo "site_noop: $1 exited $rc (see $2):" >&2
    tail -n 25 "$2" >&2
    exit 1
  fi
  python3 -c "print(round($end - $start, 2))"
}

facts=() site=()
for i in $(seq 1 "$runs"); do
  f=$(timed facts "$logs/facts-$i.log" benchmarks/facts.yml)
  s=$(timed site.yml "$logs/site-$i.log" site.yml)
  hosts=$(recap "$logs/site-$i.log") || exit 1
  facts+=("$f") site+=("$s")
  echo "run $i/$runs: facts ${f} s, site.yml ${s} s (changed=0: $hosts)"
done

python3 - "${facts[*]}" "${site[*]}" <<'EOF'
import statistics, sys
facts = [float(x) for x in sys.argv[1].split()]
site = [float(x) for x in sys.argv[2].split()]
f, s = statistics.median(facts), statistics.median(site)
print(f"median of {len(facts)}: bare facts play {f:.2f} s, no-op site.yml {s:.2f} s, ratio {s / f:.1f}x (target <= 4x)")
EOF
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

if $profile; then
  echo
  echo "profile run (ansible.posix.profile_roles + profile_tasks, not timed; log $logs/site-profile.log):"
  ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_roles,ansible.posix.profile_tasks \
  PROFILE_TASKS_TASK_OUTPUT_LIMIT=$top PROFILE_TASKS_SORT_ORDER=descending \
    timed profile "$logs/site-profile.log" site.yml >/dev/null
  recap "$logs/site-profile.log" >/dev/null || exit 1
  # everything after the recap's host lines: the role totals, then the top tasks
  awk '/^PLAY RECAP/ {r = 1; next} r && /^$/ && !p {p = 1; next} p' "$logs/site-profile.log"
fi
echo "logs: $logs"
