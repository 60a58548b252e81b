#!/usr/bin/env bash
# The newest controller lane: ansible-core of requirements-newest.txt on the Python of the sim's
# Debian 13 node image, in a container that is a thin layer on that image (a venv inside, see
# scripts/controller-newest.Dockerfile). It drives the sim pairs over the same ssh config as the
# default controller: the container shares the host's network and sees this checkout at its own path.
#
#   scripts/controller-newest.sh image            build the image (cached by content), print its tag
#   scripts/controller-newest.sh run CMD [ARG...] run a command in it, in this checkout
#   scripts/controller-newest.sh versions         "ansible-core X, Python Y"
#   scripts/controller-newest.sh sanity           ansible-test sanity of the collection on that release
#   scripts/controller-newest.sh unit             the collection's unit tests on that release
#   scripts/controller-newest.sh syntax           ansible-playbook --syntax-check of the entry playbooks
#   scripts/controller-newest.sh gate             all of the above, one summary line each (scripts/test-all.sh
#                                                 gate controllers); the molecule default scenario's verify adds
#                                                 the converge, re-run and validate lines (test_site_via_newest_controller.py)
#
# Summary lines also land in .cache/controllers/*.txt, which scripts/test-all.sh prints with its summary.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=$repo/.cache/controller-newest
summary_dir=$repo/.cache/controllers
mkdir -p "$cache" "$summary_dir"
say() { printf 'controller-newest: %s\n' "$*" >&2; }
die() { printf 'controller-newest: error: %s\n' "$*" >&2; exit 1; }
host_python() {
  if [ -x "$repo/.venv/bin/python" ]; then echo "$repo/.venv/bin/python"; else command -v python3; fi
}

# image: the sim's debootstrap base image, as sim/spark-sim builds it for the node image (built if
# missing; the lock keeps this and the molecule gate from building it twice at once): the base without
# the node's hardware stand-ins (show_gids, nvidia-smi ... on its PATH would change what the unit tests
# see). Then the wheels of requirements-newest.txt for its Python (downloaded on the host, as the sim's
# wheelhouse is), then the thin layer.
image() {
  local node key tag pyver machine abi wheels stamp want t0 log
  exec 7>"$repo/.cache/sim-build.lock"
  flock 7
  log=$cache/spark-sim-build.log
  PATH="$repo/.venv/bin:$PATH" "$repo/sim/spark-sim" build 2>"$log" >/dev/null || { cat "$log" >&2; die "sim/spark-sim build failed"; }
  # spark-sim logs the base it used ("base image B is up to date" / "building node image N from B");
  # a base named by spark_sim_base_image is not logged: then the node image itself
  node=$(grep -oE 'spark-sim-base:[0-9a-f]+' "$log" | tail -n 1 || true)
  [ -n "$node" ] || node=$(PATH="$repo/.venv/bin:$PATH" "$repo/sim/spark-sim" build 2>/dev/null)
  key=$(cat "$repo/requirements-newest.txt" "$repo/scripts/controller-newest.Dockerfile" <(echo "$node") | sha256sum | cut -c1-16)
  tag=dgxspark-controller-newest:$key
  if docker image inspect "$tag" >/dev/null 2>&1; then
    flock -u 7
    echo "$tag"
    return
  fi
  t0=$(date +%s)
  read -r pyver machine < <(docker run --rm --network none --entrypoint /usr/bin/python3 "$node" -c \
    'import platform, sys; print("%d.%d" % sys.version_info[:2], platform.machine())')
  [ -n "${machine:-}" ] || die "cannot read the Python version of $node"
  wheels=$cache/context/wheels
  stamp=$wheels/.key
  want="$pyver $machine $(sha256sum <"$repo/requirements-newest.txt" | cut -c1-16)"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    say "downloading the wheels of requirements-newest.txt for Python $pyver on $machine"
    rm -rf "$wheels"
    mkdir -p "$wheels"
    abi=cp${pyver/./}
    "$(host_python)" -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
      --implementation cp --python-version "$pyver" --abi "$abi" --abi abi3 --abi none \
      --platform "manylinux_2_28_$machine" --platform "manylinux_2_17_$machine" --platform "manylinux2014_$machine" \
      --platform any --dest "$wheels" -r "$repo/requirements-newest.txt" \
      || { rm -rf "$wheels"; die "pip download of requirements-newest.txt failed (the host needs PyPI or its configured index)"; }
    echo "$want" >"$stamp"
  fi
  cp "$repo/requirements-newest.txt" "$cache/context/requirements-newest.txt"
  say "building $tag on $node"
  DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE=$node" -t "$tag" \
    -f "$repo/scripts/controller-newest.Dockerfile" "$cache/context" >/dev/null || die "docker build of $tag failed"
  say "built $tag in $(( $(date +%s) - t0 ))s"
  flock -u 7
  echo "$tag"
}

# run CMD...: in the container, as root, in this checkout (same absolute path, so SPARK_SIM_DIR, the
# ssh key and known_hosts paths of the sim's ssh settings hold), host network (the sim's management
# bridges), the host's CA bundle (ansible-test's pip), ansible-test's venvs kept beside the default controller's
# (~/.ansible/test, which scripts/sanity.sh's ansible-test keeps across clones): in ~/.ansible/test-controller-newest,
# so a fresh clone does not build every sanity venv again (that cost this lane 9 of its minutes in every gate).
test_cache=$HOME/.ansible/test-controller-newest
run() {
  local tag=${CONTROLLER_NEWEST_IMAGE:-}
  [ -n "$tag" ] || tag=$(image)
  mkdir -p "$test_cache"
  # --cgroupns private and SYS_PTRACE: what a controller sees of its own processes on a host (the unit
  # tests start processes and look them up in /proc: in docker's default they would sit in the container's
  # cgroup, and another uid's fds would be unreadable to root without that capability).
  docker run --rm --init --network host --cgroupns private --cap-add SYS_PTRACE -v "$repo:$repo" -w "$PWD" \
    -v "$test_cache:/root/.ansible/test" \
    -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
    -e PIP_CERT=/etc/ssl/certs/ca-certificates.crt -e PIP_DISABLE_PIP_VERSION_CHECK=1 \
    ${SPARK_SIM_DIR:+-e SPARK_SIM_DIR="$SPARK_SIM_DIR"} \
    "$tag" "$@"
}

versions() {
  run python -c 'import sys, ansible.release as r; print("ansible-core %s, Python %s" % (r.__version__, sys.version.split()[0]))'
}

# sanity: the collection as scripts/sanity.sh sees it (scripts/sanity-tree.sh), under
# .cache/controller-newest/sanity/ansible_collections/dgxspark/cluster.
sanity() {
  local tree pipver
  tree=$("$repo/scripts/sanity-tree.sh" "$cache/sanity")
  # ansible-test's venvs bootstrap pip from a cached get-pip script: one that only calls ensurepip
  pipver=$(run python -c 'import inspect, re
from ansible_test._internal import python_requirements as pr
print(re.search(r"pip='"'"'([0-9.]+)'"'"'", inspect.getsource(pr.get_venv_packages)).group(1))')
  [ -n "$pipver" ] || die "cannot read the pip version ansible-test bootstraps"
  mkdir -p "$test_cache/cache"
  printf 'import ensurepip\nensurepip.bootstrap(upgrade=True)\n' >"$test_cache/cache/get_pip_${pipver//./_}.py"
  (cd "$tree" && run bash -c 'ansible-test sanity --venv --python "$(python -c "import sys; print(\"%d.%d\" % sys.version_info[:2])")" --color no "$@"' sanity "$@")
}

# unit: tests/unit less tests/unit/sim (the sim's stand-ins and CLI, which the controller's release does not touch)
unit() {
  (cd "$repo" && run python -m pytest -q -p no:cacheprovider tests/unit --ignore=tests/unit/sim "$@")
}

# syntax: --syntax-check of the entry playbooks; a [DEPRECATION WARNING] whose text (the next 15 lines)
# names the collection or this checkout fails it, as in the default scenario's runs
syntax() {
  local pb rc=0 out=$cache/syntax.log
  : >"$out"
  for pb in site.yml validate.yml doctor.yml benchmark.yml stop.yml; do
    [ -f "$repo/$pb" ] || continue
    (cd "$repo" && run env ANSIBLE_CONFIG="$repo/ansible.cfg" ansible-playbook --syntax-check -i inventories/sim "$pb") \
      >>"$out" 2>&1 || rc=1
  done
  cat "$out"
  if ! "$(host_python)" - "$out" "$repo" <<'PY'
import sys
lines = open(sys.argv[1], encoding="utf-8", errors="replace").read().splitlines()
ours = ["\n".join(lines[i:i + 16]) for i, line in enumerate(lines) if "[DEPRECATION WARNING]" in line
        and any(mark in "\n".join(lines[i:i + 16]) for mark in ("dgxspark.cluster", "ansible_collections/dgxspark", sys.argv[2]))]
for block in ours:
    print("deprecation warning from the collection's own code:\n" + block)
sys.exit(1 if ours else 0)
PY
  then rc=1; fi
  return $rc
}

# step NAME CMD...: run a step, print and record its summary line with its time
step() {
  local name=$1 t0 rc
  shift
  t0=$(date +%s)
  if "$@"; then rc=0; else rc=$?; fi
  line=$(printf 'controller newest: %-8s %-6s %4ss' "$name" "$([ $rc = 0 ] && echo passed || echo FAILED)" "$(( $(date +%s) - t0 ))")
  echo "$line"
  echo "$line" >>"$summary_dir/newest-gate.txt"
  return $rc
}

gate() {
  local rc=0 t0 v
  rm -f "$summary_dir/newest-gate.txt"
  t0=$(date +%s)
  CONTROLLER_NEWEST_IMAGE=$(image) || return 1
  export CONTROLLER_NEWEST_IMAGE
  v=$(versions) || rc=1
  printf 'controller newest: %s (image ready in %ss)\n' "$v" "$(( $(date +%s) - t0 ))" | tee -a "$summary_dir/newest-gate.txt"
  step syntax syntax || rc=1
  step sanity sanity || rc=1
  step unit unit || rc=1
  return $rc
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  image|run|versions|sanity|unit|syntax|gate) "$cmd" "$@" ;;
  *) die "usage: $0 image|run CMD...|versions|sanity|unit|syntax|gate" ;;
esac
