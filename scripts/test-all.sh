#!/usr/bin/env bash
# Run every test gate of dgxspark.cluster (the README's test command; .ci/run calls it):
#   yamllint, ansible-lint (production), ansible-test sanity, pytest, every molecule scenario.
# Installs what it needs first (scripts/bootstrap.sh). Each gate runs even when
# an earlier one failed; the exit code is non-zero when any gate failed.
# Usage: scripts/test-all.sh [gate ...]   (gates: yamllint ansible-lint sanity pytest molecule)
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=scripts/bootstrap.sh
source "$repo/scripts/bootstrap.sh" || exit 1

gates=("$@")
[ ${#gates[@]} -gt 0 ] || gates=(yamllint ansible-lint sanity pytest molecule)
passed=0 failed=0 summary=()

gate_yamllint() { yamllint --strict . ; }
gate_ansible-lint() { ansible-lint --offline ; }
gate_sanity() { "$repo/scripts/sanity.sh" ; }
gate_pytest() { python -m pytest -q tests/unit ; }
# The molecule scenarios of the gate, in two lanes that run side by side (each
# scenario has its own sim pair, names and subnets; ansible is mostly one busy
# process per scenario, so two lanes use the CI machine's two cores). Lane 1 is
# `default`: all of site.yml, a reboot of both nodes, the reliability cases.
# Every scenario is in a lane: a scenario left out would be a test that never runs.
# MOLECULE_SCENARIOS="a b" runs those one after another instead (one lane).
GATE_LANES=("default service" "nic driver clock_cap checkpoint service_container")
molecule_lane() {  # scenario... : run them in order, log each to .cache/molecule/NAME.log
  local rc=0 scenario t0 log
  for scenario in "$@"; do
    log="$repo/.cache/molecule/$scenario.log"
    t0=$(date +%s)
    if molecule test -s "$scenario" >"$log" 2>&1; then
      echo "molecule $scenario: passed in $(( $(date +%s) - t0 ))s (log: .cache/molecule/$scenario.log)"
    else
      echo "molecule $scenario: FAILED after $(( $(date +%s) - t0 ))s; the end of its log:"
      tail -n 150 "$log" | sed "s/^/  [$scenario] /"
      rc=1
    fi
  done
  return $rc
}
gate_molecule() {
  local rc=0 pids=() lane scenario
  mkdir -p "$repo/.cache/molecule"
  for scenario in ${MOLECULE_SCENARIOS:-${GATE_LANES[*]}}; do
    [ -f "molecule/$scenario/molecule.yml" ] || { echo "molecule: no scenario $scenario" >&2; return 1; }
  done
  # Build the node image once, before the lanes could race to build it.
  "$repo/sim/spark-sim" build || return 1
  if [ -n "${MOLECULE_SCENARIOS:-}" ]; then
    # shellcheck disable=SC2086
    molecule_lane $MOLECULE_SCENARIOS
    return
  fi
  for lane in "${GATE_LANES[@]}"; do
    # shellcheck disable=SC2086
    molecule_lane $lane &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do
    wait "$pid" || rc=1
  done
  return $rc
}

for gate in "${gates[@]}"; do
  declare -F "gate_$gate" >/dev/null || { echo "unknown gate $gate (known: yamllint ansible-lint sanity pytest molecule)" >&2; exit 2; }
  printf '\n===== %s =====\n' "$gate"
  start=$(date +%s)
  if "gate_$gate"; then
    result=passed; passed=$((passed + 1))
  else
    result=FAILED; failed=$((failed + 1))
  fi
  summary+=("$(printf '%-13s %-7s %4ss' "$gate" "$result" "$(( $(date +%s) - start ))")")
done

printf '\n===== summary =====\n'
printf '%s\n' "${summary[@]}"
echo "gates: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
