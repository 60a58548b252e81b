"""vLLM-style log lines: ``(APIServer pid=123) INFO 07-31 12:00:00 [api_server.py:1885] message``.

INFO and DEBUG go to stdout (vLLM's default stream), WARNING and above to
stderr. Every record is flushed at once (journald reads a pipe).
"""

from __future__ import annotations

import logging
import os
import sys
import time

LOGGER_NAME = 'vllm'

# The source location vLLM would print for each topic (cosmetic, keeps greps working).
WHERE = {
    'api': 'api_server.py:1885',
    'args': 'utils.py:326',
    'arg_utils': 'arg_utils.py:1402',
    'config': 'config.py:1604',
    'env': 'envs.py:1189',
    'hf': 'hub.py:411',
    'dist': 'multiproc_executor.py:134',
    'worker': 'gpu_worker.py:295',
    'kv': 'kv_cache_utils.py:1087',
    'core': 'core.py:712',
    'access': 'h11_impl.py:473',
    'launcher': 'launcher.py:46',
    'shm': 'shm_broadcast.py:705',
    'async_llm': 'async_llm.py:480',
    'standin': 'standin.py:1',
}


class _Formatter(logging.Formatter):
    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime('%m-%d %H:%M:%S', time.localtime(record.created))
        where = WHERE.get(getattr(record, 'where', 'standin'), 'standin.py:1')
        proc = getattr(record, 'proc', None)    # another vLLM process's prefix (EngineCore): the stand-in is one process
        prefix = '(%s pid=%d) ' % (proc, os.getpid()) if proc else self.prefix
        text = '%s%s %s [%s] %s' % (prefix, record.levelname, stamp, where, record.getMessage())
        if record.exc_info:
            text += '\n' + self.formatException(record.exc_info)
        return text


class _Below(logging.Filter):
    def __init__(self, level: int):
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < self.level


def setup(process: str) -> logging.Logger:
    """Log as ``(process pid=N)``; INFO to stdout, WARNING+ to stderr."""
    logger = logging.getLogger(LOGGER_NAME)
    logger.handlers.clear()
    logger.propagate = False
    level = os.environ.get('VLLM_LOGGING_LEVEL', 'INFO').upper()
    logger.setLevel(getattr(logging, level, logging.INFO))
    fmt = _Formatter('(%s pid=%d) ' % (process, os.getpid()))
    out = logging.StreamHandler(sys.stdout)
    out.setFormatter(fmt)
    out.addFilter(_Below(logging.WARNING))
    err = logging.StreamHandler(sys.stderr)
    err.setFormatter(fmt)
    err.setLevel(logging.WARNING)
    logger.addHandler(out)
    logger.addHandler(err)
    return logger


def get() -> logging.Logger:
    return logging.getLogger(LOGGER_NAME)


def info(where: str, msg: str, *args, proc: str = '') -> None:
    get().info(msg, *args, extra={'where': where, 'proc': proc})


def warning(where: str, msg: str, *args, proc: str = '') -> None:
    get().warning(msg, *args, extra={'where': where, 'proc': proc})


def error(where: str, msg: str, *args, proc: str = '') -> None:
    get().error(msg, *args, extra={'where': where, 'proc': proc})
