"""``vllm`` console script of the stand-in: ``vllm serve MODEL [flags]``, ``vllm --version``.

The flags are vLLM's own names, types and defaults (argparse: an unknown flag
or a bad value exits 2, --help works). What the real server checks at start and
the sim can reproduce, the stand-in checks too (exit 1 with a message):
topology (node rank, --headless, TP x PP over the nodes vs the GPUs of a node),
--max-model-len against the model's maximum, --gpu-memory-utilization, the
speculative config, the HF cache when HF_HUB_OFFLINE=1. See README.md for the
VLLM_STANDIN_* knobs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from typing import Any, Dict, List, Optional

from vllm import __version__, chat_template, checks, log, nccl, standin_startup
from vllm.rendezvous import Head, Worker
from vllm.server import ApiServer, Engine

DEFAULT_MODEL = 'Qwen/Qwen3-0.6B'

# Arguments that only the API server of the head uses: they may differ between ranks.
FRONTEND_ARGS = {
    'subcommand', 'host', 'port', 'api_key', 'served_model_name', 'node_rank', 'headless', 'tool_call_parser',
    'enable_auto_tool_choice', 'reasoning_parser', 'reasoning_config', 'default_chat_template_kwargs', 'chat_template',
    'uvicorn_log_level', 'disable_uvicorn_access_log', 'enable_log_requests', 'disable_log_requests', 'disable_log_stats',
    'enable_prompt_tokens_details', 'allowed_origins', 'root_path', 'ssl_keyfile', 'ssl_certfile', 'api_server_count',
    'model_tag', 'model',
}


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


# ---------------------------------------------------------------------------- argument types

def human_int(value: str) -> int:
    """``1048576``, ``1m`` (10^6), ``1M`` (2^20), ``32k``, ``128K``, like vLLM's human-readable ints."""
    text = str(value).strip()
    units = {'k': 10 ** 3, 'm': 10 ** 6, 'g': 10 ** 9, 'K': 2 ** 10, 'M': 2 ** 20, 'G': 2 ** 30}
    try:
        if text and text[-1] in units:
            return int(float(text[:-1]) * units[text[-1]])
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError('invalid human-readable integer: %r' % value)


def json_object(value: str) -> Dict[str, Any]:
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError('invalid JSON (%s): %r' % (exc, value))
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError('expected a JSON object: %r' % value)
    return parsed


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog='vllm', description='vLLM CLI (spark-sim stand-in %s: no GPU, no model)' % __version__)
    parser.add_argument('-v', '--version', action='version', version=__version__)
    sub = parser.add_subparsers(dest='subcommand', metavar='{serve}')
    sub.required = True
    serve = parser.serve_parser = sub.add_parser('serve', help='Launch a local OpenAI-compatible API server to serve LLM completions via HTTP.',
                           usage='vllm serve [model_tag] [options]',
                           description='Start the vLLM OpenAI-compatible API server (spark-sim stand-in).')
    serve.add_argument('model_tag', nargs='?', default=None, help='The model tag to serve (optional if --model is given).')

    front = serve.add_argument_group('Frontend')
    front.add_argument('--host', default=None, help='Host name.')
    front.add_argument('--port', type=int, default=8000, help='Port number.')
    front.add_argument('--api-key', nargs='+', default=None, help='Require one of these keys in the Authorization header.')
    front.add_argument('--served-model-name', nargs='+', default=None, help='Model name(s) used in the API.')
    front.add_argument('--tool-call-parser', default=None)
    front.add_argument('--enable-auto-tool-choice', action='store_true', default=False)
    front.add_argument('--reasoning-parser', default=None)
    front.add_argument('--reasoning-config', type=json_object, default=None)
    front.add_argument('--default-chat-template-kwargs', type=json_object, default=None)
    front.add_argument('--chat-template', default=None)
    front.add_argument('--enable-prompt-tokens-details', action='store_true', default=False)
    front.add_argument('--uvicorn-log-level', default='info', choices=['critical', 'error', 'warning', 'info', 'debug', 'trace'])
    front.add_argument('--disable-uvicorn-access-log', action='store_true', default=False)
    front.add_argument('--enable-log-requests', action=argparse.BooleanOptionalAction, default=False)
    front.add_argument('--disable-log-requests', action='store_true', default=False)
    front.add_argument('--disable-log-stats', action='store_true', default=False)
    front.add_argument('--allowed-origins', type=json.loads, default=['*'])
    front.add_argument('--root-path', default=None)
    front.add_argument('--headless', action='store_true', default=False, help='Run in headless mode (no API server).')
    front.add_argument('--api-server-count', '-asc', type=int, default=1)

    model = serve.add_argument_group('ModelConfig')
    model.add_argument('--model', default=DEFAULT_MODEL)
    model.add_argument('--revision', default=None)
    model.add_argument('--tokenizer', default=None)
    model.add_argument('--tokenizer-mode', default='auto')
    model.add_argument('--trust-remote-code', action=argparse.BooleanOptionalAction, default=False)
    model.add_argument('--dtype', default='auto', choices=['auto', 'half', 'float16', 'bfloat16', 'float', 'float32'])
    model.add_argument('--seed', type=int, default=0)
    model.add_argument('--max-model-len', type=human_int, default=None)
    model.add_argument('--quantization', '-q', default=None)
    model.add_argument('--enforce-eager', action=argparse.BooleanOptionalAction, default=False)
    model.add_argument('--generation-config', default='auto')
    model.add_argument('--override-generation-config', type=json_object, default=None)
    model.add_argument('--limit-mm-per-prompt', type=json_object, default=None)

    par = serve.add_argument_group('ParallelConfig')
    par.add_argument('--tensor-parallel-size', '-tp', type=int, default=1)
    par.add_argument('--pipeline-parallel-size', '-pp', type=int, default=1)
    par.add_argument('--data-parallel-size', '-dp', type=int, default=1)
    par.add_argument('--distributed-executor-backend', default=None, choices=['ray', 'mp', 'uni', 'external_launcher'])
    par.add_argument('--nnodes', '-n', type=int, default=1)
    par.add_argument('--node-rank', '-r', type=int, default=0)
    par.add_argument('--master-addr', default='127.0.0.1')
    par.add_argument('--master-port', type=int, default=29501)
    par.add_argument('--enable-expert-parallel', '-ep', action=argparse.BooleanOptionalAction, default=False)

    cache = serve.add_argument_group('CacheConfig')
    cache.add_argument('--kv-cache-dtype', default='auto',
                       choices=['auto', 'bfloat16', 'fp8', 'fp8_e4m3', 'fp8_e5m2', 'fp8_inc', 'fp8_ds_mla', 'nvfp4_ds_mla'])
    cache.add_argument('--block-size', type=int, default=None)
    cache.add_argument('--gpu-memory-utilization', type=float, default=0.9)
    cache.add_argument('--enable-prefix-caching', action=argparse.BooleanOptionalAction, default=None)
    cache.add_argument('--swap-space', type=float, default=4)

    sched = serve.add_argument_group('SchedulerConfig')
    sched.add_argument('--max-num-seqs', type=int, default=None)
    sched.add_argument('--max-num-batched-tokens', type=human_int, default=None)
    sched.add_argument('--long-prefill-token-threshold', type=int, default=0)
    sched.add_argument('--enable-chunked-prefill', action=argparse.BooleanOptionalAction, default=None)
    sched.add_argument('--async-scheduling', action=argparse.BooleanOptionalAction, default=None)

    other = serve.add_argument_group('Speculative, compilation, kernels')
    other.add_argument('--speculative-config', type=json_object, default=None)
    other.add_argument('--max-cudagraph-capture-size', type=int, default=None)
    other.add_argument('--compilation-config', '-O', type=json_object, default=None)
    other.add_argument('--attention-config', type=json_object, default=None)
    other.add_argument('--kv-transfer-config', type=json_object, default=None)
    other.add_argument('--moe-backend', default=None)
    other.add_argument('--enable-flashinfer-autotune', action=argparse.BooleanOptionalAction, default=None)
    return parser


# ---------------------------------------------------------------------------- start-up checks

def non_default_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Dict[str, Any]:
    defaults = vars(parser.parse_args(['serve']))
    return {k: v for k, v in vars(args).items() if k != 'subcommand' and defaults.get(k) != v}


def engine_args(args: argparse.Namespace, model: str) -> Dict[str, Any]:
    """The arguments every rank must agree on (everything the API server alone does not use)."""
    out = {k: v for k, v in vars(args).items() if k not in FRONTEND_ARGS}
    out['model'] = model
    return out


def config_problems(args: argparse.Namespace) -> List[str]:
    problems = []
    if args.nnodes < 1:
        problems.append('--nnodes is %d, expected at least 1' % args.nnodes)
    if not 0 <= args.node_rank < max(args.nnodes, 1):
        problems.append('--node-rank is %d, expected 0..%d for --nnodes %d' % (args.node_rank, max(args.nnodes - 1, 0), args.nnodes))
    if args.headless and args.node_rank == 0 and args.nnodes > 1:
        problems.append('--headless on node rank 0: the head (node rank 0) runs the API server; only workers (node rank > 0) '
                        'run headless')
    if not args.headless and args.node_rank > 0:
        problems.append('node rank %d runs without --headless: only node rank 0 serves the API; start the workers with --headless'
                        % args.node_rank)
    if args.nnodes > 1 and args.distributed_executor_backend not in ('mp',):
        problems.append('--distributed-executor-backend is %s with --nnodes %d: the stand-in does the multi-node rendezvous of the '
                        'mp backend only (--distributed-executor-backend mp)' % (args.distributed_executor_backend, args.nnodes))
    world = args.tensor_parallel_size * args.pipeline_parallel_size
    gpus = _env_int('VLLM_STANDIN_GPUS_PER_NODE', 1)
    if args.tensor_parallel_size < 1 or args.pipeline_parallel_size < 1:
        problems.append('--tensor-parallel-size and --pipeline-parallel-size must be at least 1')
    elif world % max(args.nnodes, 1) or world < args.nnodes:
        problems.append('world size %d (tensor parallel %d x pipeline parallel %d) cannot be split over %d nodes'
                        % (world, args.tensor_parallel_size, args.pipeline_parallel_size, args.nnodes))
    elif world // max(args.nnodes, 1) > gpus:
        problems.append('world size %d over %d node(s) needs %d GPU(s) per node, this node has %d (a DGX Spark has one GB10): '
                        'set --tensor-parallel-size to the number of nodes'
                        % (world, args.nnodes, world // max(args.nnodes, 1), gpus))
    if not 0 < args.gpu_memory_utilization <= 1:
        problems.append('--gpu-memory-utilization is %s, expected more than 0 and at most 1' % args.gpu_memory_utilization)
    model_max = _env_int('VLLM_STANDIN_MODEL_MAX_LEN', 1048576)
    if args.max_model_len is not None and args.max_model_len > model_max and not checks.env_true(os.environ, 'VLLM_ALLOW_LONG_MAX_MODEL_LEN'):
        problems.append('User-specified max_model_len (%d) is greater than the derived max_model_len (max_position_embeddings=%d in '
                        "model's config.json). Set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 to override." % (args.max_model_len, model_max))
    if args.max_model_len is not None and args.max_model_len < 1:
        problems.append('--max-model-len is %d, expected at least 1' % args.max_model_len)
    spec = args.speculative_config
    if spec is not None:
        k = spec.get('num_speculative_tokens')
        if 'method' not in spec and 'model' not in spec:
            problems.append('--speculative-config has neither method nor model: %s' % json.dumps(spec))
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            problems.append('--speculative-config num_speculative_tokens is %r, expected a positive integer' % (k,))
    if args.max_num_seqs is not None and args.max_num_seqs < 1:
        problems.append('--max-num-seqs is %d, expected at least 1' % args.max_num_seqs)
    for name in ('port', 'master_port'):
        if not 0 <= getattr(args, name) <= 65535:
            problems.append('--%s is %d, expected 0..65535' % (name.replace('_', '-'), getattr(args, name)))
    return problems


def kv_capacity_tokens(args: argparse.Namespace) -> int:
    """The GPU KV cache size in tokens (2,493,464 at --gpu-memory-utilization 0.835, scaled linearly from 0.6)."""
    return int(2493464 * max(0.05, (args.gpu_memory_utilization - 0.6) / (0.835 - 0.6)))


def kv_cache_lines(args: argparse.Namespace, max_model_len: int) -> List[str]:
    """The boot lines operators grep for (seed 004 numbers at utilization 0.835, scaled)."""
    scale = max(0.05, (args.gpu_memory_utilization - 0.6) / (0.835 - 0.6))
    gib = 18.08 * scale
    tokens = kv_capacity_tokens(args)
    return ['Available KV cache memory: %.2f GiB' % gib,
            'GPU KV cache size: {:,} tokens'.format(tokens),
            'Maximum concurrency for {:,} tokens per request: {:.2f}x'.format(max_model_len, tokens / max_model_len)]


# ---------------------------------------------------------------------------- lifecycle

class Lifecycle:
    """Stop event + exit code shared by the signal handlers and the rendezvous threads."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.code: Optional[int] = None
        self.lock = threading.Lock()

    def exit(self, code: int) -> None:
        with self.lock:
            if self.code is None:
                self.code = code
        self.stop.set()

    def wait(self) -> None:
        while not self.stop.wait(0.2):
            pass


def _peer_loss_code() -> int:
    return 0 if checks.env_true(os.environ, 'VLLM_STANDIN_EXIT_ZERO_ON_PEER_LOSS') else 1


def _install_signals(life: Lifecycle) -> None:
    def terminate(signum: int, _frame: Any) -> None:
        log.info('launcher', 'Received %s, shutting down.', signal.Signals(signum).name)
        life.exit(0)

    def crash(_signum: int, _frame: Any) -> None:
        # seed 000: a degraded worker died on a device-side assertion and exited with status 0.
        code = _env_int('VLLM_STANDIN_CRASH_EXIT_CODE', 1)
        log.error('worker', 'CUDA error: device-side assert triggered (indexSelectSmallIndex: srcIndex < srcSelectDimSize) '
                  '[simulated by SIGUSR1]; exiting with status %d', code)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, terminate)
    signal.signal(signal.SIGUSR1, crash)


def _nccl_init_failed(rank: int) -> bool:
    """NCCL's communicator init once every rank joined (vllm/nccl.py): log its failure and say so."""
    problem = nccl.init_problem(os.environ)
    if problem is None:
        return False
    for line in nccl.failure_lines(problem, rank):
        log.error('parallel_state', '%s', line)
    return True


def run_head(args: argparse.Namespace, model: str, served: List[str], max_model_len: int, eargs: Dict[str, Any],
             life: Lifecycle) -> int:
    k = int((args.speculative_config or {}).get('num_speculative_tokens') or 0)

    def on_dead() -> None:
        # launcher.py: the waiting requests get their 500 first, then the server exits (VLLM_KEEP_ALIVE_ON_ENGINE_DEATH unset)
        threading.Timer(0.5, life.exit, [_peer_loss_code()]).start()

    engine = Engine(model, served, max_model_len, k, _env_float('VLLM_STANDIN_STEP_SECONDS', 0.0),
                    execute_timeout=_env_float('VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS', 300.0),   # vllm/envs.py default
                    warn_interval=_env_float('VLLM_RINGBUFFER_WARNING_INTERVAL', 60.0), on_dead=on_dead,
                    chunk_tokens=args.max_num_batched_tokens or 8192, kv_capacity_tokens=kv_capacity_tokens(args))
    engine.chat_problem = chat_template.startup(args, model, os.environ)   # tokenizer mode / Jinja template (chat_template.py)
    ready = threading.Event()

    def on_lost(rank: int, ip: str, reason: str) -> None:
        if not ready.is_set():
            log.error('core', 'Engine core initialization failed: lost node rank %d (ip=%s) during start-up: %s', rank, ip, reason)
            life.exit(_peer_loss_code())
            return
        # Serving: real vLLM's head logs nothing (its worker monitor watches only its own node's processes) and
        # /health stays 200; requests wait until the execute-model timeout (server.Engine).
        engine.rank_down(rank, 'lost')

    def on_stall(rank: int, ip: str, reason: str) -> None:
        if not ready.is_set():
            on_lost(rank, ip, reason)
            return
        engine.rank_down(rank, 'stalled')

    def on_fatal(error: str) -> None:
        log.error('core', 'Engine core initialization failed: %s', error)
        life.exit(1)

    head = None
    if args.nnodes > 1:
        head = Head(args.master_addr, args.master_port, args.nnodes, eargs, _env_float('VLLM_STANDIN_PEER_TIMEOUT', 10.0),
                    on_lost, on_fatal, on_stall, engine.rank_up)
        try:
            head.start()
        except OSError as exc:
            log.error('dist', 'Cannot listen on --master-addr %s:%d (%s): the master address must be this head\'s own fabric '
                      'address and the port free', args.master_addr, args.master_port, exc)
            return 1
        if not head.wait_all(life.stop):
            head.shutdown()
            return life.code if life.code is not None else 0
        if _nccl_init_failed(0):
            head.shutdown()
            return 1
    load = _env_float('VLLM_STANDIN_LOAD_SECONDS', 2.0)
    log.info('worker', 'Loading weights of %s (simulated, %.1f s)', model, load)
    if life.stop.wait(load):
        if head:
            head.shutdown()
        return life.code if life.code is not None else 0
    for line in kv_cache_lines(args, max_model_len):
        log.info('kv', '%s', line)
    ready.set()
    if head:
        head.announce_ready()
    host = args.host if args.host is not None else '0.0.0.0'
    keys = [os.environ.get('VLLM_API_KEY', '')] + list(args.api_key or [])
    try:
        api = ApiServer(host, args.port, engine, keys)
    except OSError as exc:
        log.error('api', 'Cannot bind the API server to %s:%d: %s', host, args.port, exc)
        if head:
            head.shutdown()
        return 1
    api.start()
    log.info('api', 'Starting vLLM API server 0 on http://%s:%d', host, args.port)
    log.info('launcher', 'Available routes are: /health, /ping, /version, /metrics, /v1/models, /v1/chat/completions, '
             '/v1/completions')
    log.info('launcher', 'Application startup complete.')
    life.wait()
    engine.stopping.set()
    if head:
        head.shutdown()
    api.stop()
    code = life.code if life.code is not None else 0
    if engine.dead.is_set():
        log.info('launcher', 'Shutting down')     # uvicorn, after launcher.py's terminate_if_errored
        log.info('launcher', 'Waiting for application shutdown.')
        log.info('launcher', 'Application shutdown complete.')
    log.info('launcher', 'Shutting down (exit status %d).', code)
    return code


def run_worker(args: argparse.Namespace, eargs: Dict[str, Any], life: Lifecycle) -> int:
    worker = Worker(args.master_addr, args.master_port, args.node_rank, args.nnodes, eargs, __version__,
                    _env_float('VLLM_STANDIN_PEER_TIMEOUT', 10.0))
    log.info('dist', 'Headless node rank %d of %d: joining the head at %s:%d', args.node_rank, args.nnodes,
             args.master_addr, args.master_port)
    if not worker.connect(life.stop):
        return life.code if life.code is not None else 0
    error = worker.register()
    if error:
        log.error('dist', '%s', error)
        worker.close()
        return 1
    if _nccl_init_failed(args.node_rank):
        worker.close()
        return 1

    def on_ready() -> None:
        log.info('worker', 'Node rank %d ready: engine initialized on all nodes (headless: no API server here)', args.node_rank)

    def follow() -> None:
        reason = worker.follow(on_ready)
        if life.stop.is_set():
            return
        log.error('core', 'Lost the head (node rank 0, ip=%s): %s. Exiting.', args.master_addr, reason)
        life.exit(_peer_loss_code())

    threading.Thread(target=follow, name='rendezvous-follow', daemon=True).start()
    life.wait()
    worker.close()
    code = life.code if life.code is not None else 0
    log.info('launcher', 'Shutting down (exit status %d).', code)
    return code


def serve(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    standin_startup.record_serve()  # the DSpark recipe's start-up record (helper 5; see standin_startup.py)
    log.setup('Headless' if args.headless else 'APIServer')
    model = args.model_tag or args.model
    served = list(args.served_model_name or [model])
    log.info('api', 'vLLM API server version %s', __version__)
    log.info('args', 'non-default args: %s', non_default_args(parser, args))
    if args.api_key:
        log.warning('arg_utils', '--api-key puts the key in the process arguments (ps, the journal); vLLM also reads '
                    'VLLM_API_KEY from the environment')
    for warning in checks.nccl_warnings(os.environ):
        log.warning('env', '%s', warning)
    problems = config_problems(args)
    if problems:
        for problem in problems:
            log.error('config', 'ValueError: %s', problem)
        return 1
    problem = checks.hf_cache_problem(model, args.revision, os.environ)
    if problem:
        if checks.is_path(model):
            log.error('hf', 'OSError: %s', problem)
            return 1
        if checks.env_true(os.environ, 'HF_HUB_OFFLINE'):
            log.error('hf', 'huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder '
                      'for the specified revision on the local disk and outgoing traffic has been disabled. To enable repo '
                      "look-ups and downloads online, set 'HF_HUB_OFFLINE=0' as environment variable. (%s)", problem)
            return 1
        log.warning('hf', 'The stand-in does not download: %s; serving without weights.', problem)
    max_model_len = args.max_model_len or _env_int('VLLM_STANDIN_MODEL_MAX_LEN', 1048576)
    life = Lifecycle()
    _install_signals(life)
    eargs = engine_args(args, model)
    if args.headless:
        return run_worker(args, eargs, life)
    return run_head(args, model, served, max_model_len, eargs, life)


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        parser.serve_parser.error('unrecognized arguments: %s' % ' '.join(unknown))
    return serve(parser, args)


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
