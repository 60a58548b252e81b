#!/usr/bin/env bash
# Build the spark-sim base image with debootstrap and import it into docker.
# Usage: build-base.sh TAG SUITE MIRROR PACKAGES_FILE
# Called by sim/spark-sim (which decides the content-hash TAG); safe to run by hand.
set -euo pipefail
tag=$1 suite=$2 mirror=$3 pkgfile=$4
command -v debootstrap >/dev/null || { echo "spark-sim: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 2; }
include=$(grep -vE '^\s*(#|$)' "$pkgfile" | paste -sd, -)
work=$(mktemp -d /var/tmp/spark-sim-rootfs.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "spark-sim: debootstrap $suite into $work (this takes about a minute)" >&2
if ! debootstrap --variant=minbase --include="$include" "$suite" "$work/root" "$mirror" >"$work.log" 2>&1; then
  tail -n 20 "$work.log" >&2
  echo "spark-sim: debootstrap of $suite from $mirror failed (see the lines above; full log $work.log)" >&2
  exit 3
fi
rm -f "$work.log"
root=$work/root
# A node gets its own machine-id and ssh host keys at first boot, never the image's.
: >"$root/etc/machine-id"
rm -f "$root"/etc/ssh/ssh_host_*
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb
tar -C "$root" -c . | docker import \
  --change 'CMD ["/lib/systemd/systemd"]' \
  --change 'ENV container=docker' \
  - "$tag" >/dev/null
echo "spark-sim: imported $tag" >&2
