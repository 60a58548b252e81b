"""spark-sim: the record of the DSpark recipe's container start-up steps (stand-in image only).

The recipe's compose start-up (docker-compose.dspark.yml) runs its hotfix scripts before
``exec /usr/local/bin/vllm serve``. The sim's stand-in recipe checkout
(sim/dspark-recipe-standin) has the same file names and switch names, and each of its
steps only calls ``record``: one line per step, in order, in ``VLLM_STANDIN_STARTUP_LOG``
(default ``/var/tmp/dgxspark-standin-startup.log``, in the container's own layer, so a recreated
container starts a fresh record; not under /tmp, which the collection binds to the node's persistent
cache as the recipe's compose does) and on stderr (the container's log). ``vllm serve``
records itself last (``record_serve``), so a test can assert the steps ran, in the
recipe's order, before serving.

Fault mode: ``VLLM_STANDIN_FAIL_STEP=<step name>`` makes that step exit 1, like a
hotfix whose anchor no longer matches (the recipe's ``|| exit 1``).

    python3 -m vllm.standin_startup record NAME [ARG...]
"""

import os
import sys
import time

DEFAULT_LOG = '/var/tmp/dgxspark-standin-startup.log'


def _log_path():
    return os.environ.get('VLLM_STANDIN_STARTUP_LOG') or DEFAULT_LOG


def record(name, *args):
    """Append one step to the record; exit 1 when it is the step the fault mode fails."""
    line = ' '.join([name] + [a for a in args])
    if name == os.environ.get('VLLM_STANDIN_FAIL_STEP', ''):
        sys.stderr.write('FATAL: %s failed (VLLM_STANDIN_FAIL_STEP): anchor not found in the stand-in vLLM\n' % name)
        sys.stderr.flush()
        raise SystemExit(1)
    os.makedirs(os.path.dirname(_log_path()) or '.', exist_ok=True)   # a minimal image may have no /var/tmp
    with open(_log_path(), 'a') as out:
        out.write('%.6f %s\n' % (time.time(), line))
    sys.stderr.write('DSPARK start-up (stand-in): applied %s\n' % line)
    sys.stderr.flush()


def record_serve():
    """``vllm serve`` started: the last line of a start-up record (only when a recipe start-up wrote one)."""
    if os.path.exists(_log_path()):
        with open(_log_path(), 'a') as out:
            out.write('%.6f vllm-serve\n' % time.time())


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 2 or argv[0] != 'record':
        sys.stderr.write('usage: python3 -m vllm.standin_startup record NAME [ARG...]\n')
        return 2
    record(*argv[1:])
    return 0


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
