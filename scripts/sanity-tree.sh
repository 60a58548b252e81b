#!/usr/bin/env bash
# scripts/sanity-tree.sh ROOT: the collection as ansible-test wants it, ROOT/ansible_collections/dgxspark/cluster,
# built afresh from this checkout's tracked (and untracked, not ignored) files, less the collections/ self-link and
# the test rig (sim/, molecule/, tests/fixtures/: galaxy.yml's build_ignore; the stand-ins keep the interpreters of the
# tools they replace, the real captures keep their bytes), made a git repository of its own (ansible-test lists the
# collection's files with git). Prints the tree's path. Used by scripts/sanity.sh and scripts/controller-newest.sh.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
root=${1:?usage: scripts/sanity-tree.sh ROOT}
tree=$root/ansible_collections/dgxspark/cluster
rm -rf "$root"
mkdir -p "$tree"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard | grep -zvE '^(collections|sim|molecule|tests/fixtures)/|^\.venv$' \
  | while IFS= read -r -d '' f; do
      if [ -e "$f" ] || [ -L "$f" ]; then cp -P --parents "$f" "$tree/"; fi
    done)
(cd "$tree" && git init -q && git add -A && git -c user.name=sanity -c user.email=sanity@localhost commit -qm sanity)
echo "$tree"
