#!/bin/sh
# Build a container image of the vLLM stand-in inside a spark-sim node, without a
# registry or debootstrap: the node's own python3 (binary, shared libraries,
# standard library) plus the stand-in package, imported with `docker import`.
# Usage (as root on the node): build-image.sh STANDIN_DIR TAG
#   STANDIN_DIR: a copy of sim/vllm-standin on the node; TAG: e.g. spark-sim/vllm-standin:0.27.1
# The image's entrypoint is `vllm serve` (/usr/local/bin/vllm, like the Anemll image).
set -eu
src=$1 tag=$2
[ -d "$src/src/vllm" ] || { echo "build-image.sh: $src/src/vllm not found (a copy of sim/vllm-standin expected)" >&2; exit 2; }
py=$(readlink -f /usr/bin/python3)
ver=$(basename "$py")
root=$(mktemp -d /var/tmp/vllm-standin-image.XXXXXX)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/bin" "$root/usr/local/bin" "$root/usr/local/lib/$ver/dist-packages" "$root/etc" "$root/tmp"
chmod 1777 "$root/tmp"
cp -a "$py" "$root/usr/bin/"
ln -s "$ver" "$root/usr/bin/python3"
tar -C / -cf - --exclude='__pycache__' --exclude="usr/lib/$ver/test" --exclude="usr/lib/$ver/idlelib" \
  --exclude="usr/lib/$ver/tkinter" "usr/lib/$ver" | tar -C "$root" -xf -
# bash: the DSpark recipe's start-up is a `bash -lc` script (the Anemll image has it); the
# stand-in recipe's steps need nothing else (no coreutils).
bash=$(readlink -f /bin/bash)
cp -a "$bash" "$root/usr/bin/bash"
# The interpreter's and the extension modules' shared libraries, at the paths ldd resolves.
for f in "$py" "$bash" /usr/lib/"$ver"/lib-dynload/*.so; do
  ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'
done | sort -u | while read -r lib; do
  cp -L --parents "$lib" "$root/"
done
cp /etc/ld.so.cache "$root/etc/" 2>/dev/null || true
cp -a "$src/src/vllm" "$root/usr/local/lib/$ver/dist-packages/"
find "$root/usr/local/lib/$ver/dist-packages" -name __pycache__ -prune -exec rm -rf {} +
printf '#!/usr/bin/python3\nimport sys\nfrom vllm.cli import main\nsys.exit(main())\n' > "$root/usr/local/bin/vllm"
chmod 0755 "$root/usr/local/bin/vllm"
tar -C "$root" -c . | docker import \
  --change 'ENTRYPOINT ["/usr/local/bin/vllm", "serve"]' \
  --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
  - "$tag" >/dev/null
docker image inspect --format '{{.Id}}' "$tag"
