#!/usr/bin/env bash
# ansible-test sanity on the collection. ansible-test wants the collection at
# .../ansible_collections/<namespace>/<name> and sees only git-tracked files, so
# this copies the tracked files (less the collections/ self-link) into such a
# tree under .cache/ and runs there. sim/, molecule/ and tests/fixtures/ are left out:
# the test rig, not part of the built collection (galaxy.yml build_ignore); the
# stand-ins keep the interpreters of the tools they replace, and the real captures
# keep their bytes (CRLF line endings and trailing blanks are what the tests replay).
# Its venvs bootstrap pip from a cached get-pip script that only calls
# ensurepip (ansible-test's own download is not reachable here).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tree=$repo/.cache/sanity/ansible_collections/dgxspark/cluster
rm -rf "$repo/.cache/sanity"
mkdir -p "$tree"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard | grep -zvE '^(collections|sim|molecule|tests/fixtures)/' \
  | while IFS= read -r -d '' f; do
      if [ -e "$f" ] || [ -L "$f" ]; then cp -P --parents "$f" "$tree/"; fi
    done)
(cd "$tree" && git init -q && git add -A && git -c user.name=sanity -c user.email=sanity@localhost commit -qm sanity)
pipver=$(python - <<'PY'
import inspect, re
from ansible_test._internal import python_requirements as pr
print(re.search(r"pip='([0-9.]+)'", inspect.getsource(pr.get_venv_packages)).group(1))
PY
)
cache=$HOME/.ansible/test/cache
mkdir -p "$cache"
printf 'import ensurepip\nensurepip.bootstrap(upgrade=True)\n' >"$cache/get_pip_${pipver//./_}.py"
cd "$tree"
ansible-test sanity --venv --python "$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')" --color no "$@"
