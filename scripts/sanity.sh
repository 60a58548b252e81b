#!/usr/bin/env bash
# ansible-test sanity on the collection. ansible-test wants the collection at
# .../ansible_collections/<namespace>/<name> and sees only git-tracked files, so
# scripts/sanity-tree.sh copies the collection (less the test rig) into such a tree
# under .cache/ and this runs there.
# Its venvs bootstrap pip from a cached get-pip script that only calls
# ensurepip (ansible-test's own download is not reachable here).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tree=$("$repo/scripts/sanity-tree.sh" "$repo/.cache/sanity")
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
