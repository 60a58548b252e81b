#!/usr/bin/env bash
# Install what the sim and the tests need, on a machine where nothing was
# installed by hand: Debian's docker.io and debootstrap (if missing), a running
# docker engine, and the pinned Python toolchain in .venv. Safe to re-run: each
# step is skipped when already done. Sourced by the README's two commands.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
say() { printf 'bootstrap: %s\n' "$*" >&2; }
die() { printf 'bootstrap: error: %s\n' "$*" >&2; exit 1; }

SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

need_pkgs=()
command -v dockerd >/dev/null 2>&1 || need_pkgs+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need_pkgs+=(debootstrap)
command -v rsync >/dev/null 2>&1 || need_pkgs+=(rsync)
command -v ssh >/dev/null 2>&1 || need_pkgs+=(openssh-client)
command -v git >/dev/null 2>&1 || need_pkgs+=(git)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || die "missing ${need_pkgs[*]} and no apt-get here: install them with your package manager"
  say "installing ${need_pkgs[*]} (apt-get)"
  $SUDO apt-get update -qq || die "apt-get update failed: check the Debian mirror is reachable"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null \
    || die "apt-get install ${need_pkgs[*]} failed"
fi

if ! docker info >/dev/null 2>&1; then
  if [ -d /run/systemd/system ]; then
    say "starting docker (systemctl)"
    $SUDO systemctl start docker || die "systemctl start docker failed: see journalctl -u docker"
  else
    say "starting dockerd in the background (log: /var/log/spark-sim-dockerd.log)"
    $SUDO sh -c 'nohup dockerd >/var/log/spark-sim-dockerd.log 2>&1 &'
  fi
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || die "the docker engine did not come up in 60 s: see /var/log/spark-sim-dockerd.log"
fi

py=${PYTHON:-python3}
"$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || die "$py is $("$py" -V 2>&1); ansible-core 2.19 needs Python >= 3.11 (set PYTHON=/path/to/python3.11)"
venv=$repo/.venv
stamp=$venv/.requirements.sha256
want=$(cat "$repo/requirements.txt" "$repo/requirements-test.txt" | sha256sum | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "creating $venv with the pinned toolchain (a few minutes the first time)"
  "$py" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$repo/requirements-test.txt" \
    || die "pip install -r requirements-test.txt failed"
  echo "$want" >"$stamp"
fi
export PATH="$venv/bin:$PATH"
