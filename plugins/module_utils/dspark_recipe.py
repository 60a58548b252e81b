# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The DSpark recipe's container start-up, read from a pinned checkout (pure functions, no I/O).

Standard library only, never imports ``ansible`` (``plugins/filter/dspark_recipe.py`` wraps these).

The recipe (MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark, seed 004) does more at container start than
``vllm serve``: its ``docker-compose.dspark.yml`` runs ``bash -lc`` over a script that installs the 0731
encoder from the snapshot and applies its hotfixes (#21 #26 #27 #43 #55 always, #22, the spin-wait fix, the
v0.27 perf backports, suppress-stops-in-reasoning, each behind its ``DSPARK_*`` switch) and only then
``exec /usr/local/bin/vllm serve ...``. The container kind runs that script verbatim, cut just before its
``exec``, which becomes ``exec "$@"``: the rank then executes the argv of ``vllm_cmd.serve_argv`` (the one
place the command line is built) after the recipe's own steps, in the recipe's order.

``startup(compose, checkout_dir)`` takes the parsed compose file of the checkout and returns::

    {"script": "<the recipe's start-up, compose-escaped ($$), ending exec \\"$$@\\">",
     "mounts": ["<checkout>/patches/hotfix-....py:/opt/hotfix-....py:ro", ...]}

``switch_env(variables)`` turns the ``runtime_dspark_*`` role variables into the recipe's ``DSPARK_*``
environment (booleans as 0/1, as the script compares them).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping

__all__ = ['RecipeError', 'SERVE_EXEC', 'SWITCHES', 'SWITCH_PREFIX', 'startup', 'switch_env']

# Where the recipe's script hands over to vLLM; everything before it is the start-up.
SERVE_EXEC = 'exec /usr/local/bin/vllm serve'
SERVICE = 'vllm-dspark'
SWITCH_PREFIX = 'runtime_dspark_'

# The recipe's DSPARK_* switches of its start-up and their defaults: docker-compose.dspark.yml @ 489af95
# (environment:, "${NAME:-default}"), seed 004 "Hotfixes and diagnostics". name, default, kind.
# Not here: DSPARK_MODEL / DSPARK_REVISION (from runtime_vllm_model / runtime_vllm_revision), DSPARK_API_KEYS
# (the collection passes VLLM_API_KEY in the secret file), DSPARK_VLLM_IMAGE (runtime_container_image) and the
# compose-level path overrides (DSPARK_*_HOTFIX, DSPARK_PATCHES_DIR: the pinned checkout's files).
SWITCHES = (
    ('DSPARK_SKIP_ISSUE22_HOTFIX', False, 'bool'),          # 1 = skip the nvfp4_ds_mla long-context decode fix ("Don't")
    ('DSPARK_SKIP_SPIN_WAIT_HOTFIX', False, 'bool'),        # 1 = leave vLLM's shm busy_loop_s=1s (issue #79)
    ('DSPARK_SKIP_HOTFIX', False, 'bool'),                  # 1 = skip the v0.27 perf backports (#22 still applies)
    ('DSPARK_SKIP_SUPPRESS_STOPS_HOTFIX', False, 'bool'),   # 1 = do not apply suppress-stops-in-reasoning at all
    ('DSPARK_SUPPRESS_STOPS_IN_REASONING', True, 'bool'),   # 0 = client stop strings can fire inside <think>
    ('DSPARK_ENABLE_ISSUE31_GPU_HOTFIX', False, 'bool'),    # 1 = GPU thinking_token_budget patch at boot (fail-closed)
    ('DSPARK_ENABLE_ASSISTANT_FINAL_HOTFIX', False, 'bool'),  # 1 = generation header after a final assistant turn (#52)
    ('DSPARK_ISSUE43_SCHED_DIAG', False, 'bool'),           # 1 = one scheduler line per step in the log
    ('DSPARK_MAX_INFLIGHT_PREFILLS', 2, 'int'),             # the #27 hotfix's in-flight partial-prefill cap (1-3)
    ('DSPARK_ENCODING_FILE', '', 'str'),                    # the 0731 encoder to install; "" = the snapshot's
)

# A volume of the recipe's service that the start-up reads: "${VAR:-./relative}:/opt/...[:mode]".
_MOUNT_RE = re.compile(r'^\$\{[A-Za-z_][A-Za-z0-9_]*:-\./([^}:$]+)\}:(/opt/[^:]+)(?::(ro|rw))?$')


class RecipeError(ValueError):
    """The checkout is not the recipe the collection can run; the message says what was found and expected."""


def _service(compose: Any) -> Mapping[str, Any]:
    services = compose.get('services') if isinstance(compose, Mapping) else None
    if not isinstance(services, Mapping) or SERVICE not in services or not isinstance(services[SERVICE], Mapping):
        found = sorted(services) if isinstance(services, Mapping) else type(compose).__name__
        raise RecipeError('docker-compose.dspark.yml has services %s, expected the recipe\'s service %s' % (found, SERVICE))
    return services[SERVICE]


def startup(compose: Any, checkout_dir: str) -> Dict[str, Any]:
    """The recipe's start-up script (cut before its exec) and the mounts it reads, from the parsed compose file.

    >>> r = startup({'services': {'vllm-dspark': {'command': ['bash', '-lc', 'python3 /opt/a.py || exit 1;\\n'
    ...     'exec /usr/local/bin/vllm serve m --port 1'], 'volumes': ['${A:-./patches/a.py}:/opt/a.py:ro']}}}, '/r')
    >>> r['script'].splitlines()[-1], r['mounts']
    ('exec "$$@"', ['/r/patches/a.py:/opt/a.py:ro'])
    """
    service = _service(compose)
    command = service.get('command')
    if not (isinstance(command, list) and len(command) == 3 and command[:2] == ['bash', '-lc'] and isinstance(command[2], str)):
        raise RecipeError('services.%s.command of docker-compose.dspark.yml is %r, expected [bash, -lc, <start-up script>]'
                          % (SERVICE, command if not isinstance(command, list) else command[:2]))
    script = command[2]
    if script.count(SERVE_EXEC) != 1:
        raise RecipeError('the start-up script of docker-compose.dspark.yml has %d "%s", expected exactly one (where the '
                          'recipe hands over to vLLM)' % (script.count(SERVE_EXEC), SERVE_EXEC))
    head = script[:script.index(SERVE_EXEC)].rstrip()
    # Compose interpolates a single $ when it reads the file; the recipe escapes every runtime $ as $$. A single
    # one before the exec would be filled from the operator's .env.dspark, which the collection does not use.
    single = re.search(r'\$[^$]', head.replace('$$', ''))
    if single or head.replace('$$', '').endswith('$'):
        raise RecipeError('the start-up script of docker-compose.dspark.yml interpolates a compose variable before its exec '
                          '(%r), expected only $$-escaped shell variables there' % (single.group(0) if single else '$'))
    if not head.endswith(';'):
        head += ';'
    mounts = []  # type: List[str]
    for volume in service.get('volumes') or []:
        match = _MOUNT_RE.match(volume) if isinstance(volume, str) else None
        if match:
            rel, target, mode = match.groups()
            if '..' in rel.split('/'):
                raise RecipeError('the recipe mounts %r, expected a path inside the checkout' % volume)
            mounts.append('%s/%s:%s:%s' % (checkout_dir.rstrip('/'), rel.rstrip('/'), target, mode or 'rw'))
    if not any(m.split(':')[1] == '/opt/dspark-patches' for m in mounts):
        raise RecipeError('docker-compose.dspark.yml mounts no ./patches directory at /opt/dspark-patches, expected the '
                          'recipe\'s hotfix scripts there')
    return {'script': head + '\nexec "$$@"', 'mounts': mounts}


def switch_env(variables: Mapping[str, Any]) -> Dict[str, str]:
    """The DSPARK_* environment from the runtime_dspark_* role variables (missing ones take the recipe's default).

    >>> switch_env({'runtime_dspark_skip_hotfix': True})['DSPARK_SKIP_HOTFIX']
    '1'
    """
    if not isinstance(variables, Mapping):
        raise RecipeError('the recipe switches are %r, expected a dict of runtime_dspark_* variables' % (variables,))
    env = {}  # type: Dict[str, str]
    for name, default, kind in SWITCHES:
        var = SWITCH_PREFIX + name[len('DSPARK_'):].lower()
        value = variables.get(var, default)
        if kind == 'bool':
            if not isinstance(value, bool):
                raise RecipeError('%s is %r (%s), expected a boolean (true or false)' % (var, value, type(value).__name__))
            env[name] = '1' if value else '0'
        elif kind == 'int':
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 3:
                raise RecipeError('%s is %r (%s), expected an integer from 1 to 3 (the recipe\'s #27 cap)'
                                  % (var, value, type(value).__name__))
            env[name] = str(value)
        else:
            if not isinstance(value, str) or any(c in value for c in '\r\n\0'):
                raise RecipeError('%s is %r, expected a one-line string' % (var, value))
            env[name] = value
    return env
