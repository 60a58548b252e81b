"""A stand-in for the Hugging Face Hub on a spark-sim node (HTTP on loopback).

The checkpoint role downloads with the real ``hf download`` (huggingface_hub
from PyPI); pointed at this server through ``HF_ENDPOINT`` it runs unchanged,
with no internet model and no 167 GB. The server answers the calls
huggingface_hub makes for a revision-pinned snapshot download::

    GET  /api/models/<repo>/revision/<rev>          repo_info / model_info (sha, lastModified, siblings)
    GET  /api/models/<repo>/tree/<rev>[/<path>]     list_repo_tree (?recursive=true): sizes, blob ids, LFS sha256
    HEAD /<repo>/resolve/<rev>/<path>               X-Repo-Commit, ETag / X-Linked-Etag, X-Linked-Size
    GET  /<repo>/resolve/<rev>/<path>               the file (Range: hf's http_get continues its own file after a drop)

Unknown repos answer 404 with ``X-Error-Code: RepoNotFound``, unknown
revisions 404 with ``X-Error-Code: RevisionNotFound``, as the Hub does (the codes
huggingface_hub 2.4.0's utils/_http.py hf_raise_for_status maps to RepositoryNotFoundError and
RevisionNotFoundError).

The repos are synthetic and deterministic: DeepSeek-V4-Flash-0731 at the
pinned revision (dated 2026-08-01) and its two lookalikes (the preview,
whose README opens "We present a preview version", and DeepSeek-V4-Flash-DSpark
dated 2026-07-04), each with config.json, README.md, tokenizer.json,
encoding/encoding_dsv4.py, model.safetensors.index.json and N safetensors
shards (LFS files: the ETag is their sha256; small files: the git blob id).
DeepSeek-V4-Flash-0731 has a second, later commit (NEXT_REVISION, 2026-08-20:
shards 1-2 and the README re-uploaded, the other shards the same blobs), so a
pin change downloads only what changed; ``main`` names the latest commit, as on the Hub.

Spec (JSON, optional, default path /var/lib/spark-sim/hub/spec.json)::

    {"shards": 6, "shard_bytes": 1048576,     # every repo's shard count and size
     "rate_limit_bps": 0,                     # per-connection throttle (0: none), to watch progress
     "total_rate_bps": 0,                     # the line: bytes/s shared by every connection (0: none)
     "token": "",                             # non-empty: every call needs "Authorization: Bearer <token>"
     "repos": {"deepseek-ai/DeepSeek-V4-Flash-0731": {"shards": 12}}}   # per-repo overrides

Files are generated under the data directory (default /var/lib/spark-sim/hub/data)
when the spec's content knobs change, then served from disk. The rate knobs and
the token are read again whenever the spec file changes (no restart): a test can
slow the line down or speed it up while a download runs.

A token set in the spec is enforced as the Hub enforces it on a gated repo: a
call without it, or with another, answers 401 with ``X-Error-Code: GatedRepo``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import struct
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_SPEC_PATH = "/var/lib/spark-sim/hub/spec.json"
DEFAULT_DATA_DIR = "/var/lib/spark-sim/hub/data"
DEFAULT_ADDRESS = "127.0.0.1"
DEFAULT_PORT = 5564

PINNED_REVISION = "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
# A later commit of the same repo (a pin change): new README and config, shards 1 and 2 re-uploaded
# (new content, new sha256), every other shard the same blob as at the pinned revision.
NEXT_REVISION = "4c7d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d"

# repo id -> what tells it apart (the revision, the commit date, the README).
REPOS: dict[str, dict[str, Any]] = {
    "deepseek-ai/DeepSeek-V4-Flash-0731": {
        "revision": PINNED_REVISION,
        "date": "2026-08-01T00:00:00.000Z",
        "readme": (
            "---\nlicense: mit\nlibrary_name: transformers\n---\n"
            "# DeepSeek-V4-Flash-0731\n\n"
            "DeepSeek-V4-Flash-0731 (spark-sim synthetic stand-in: random weights, not a model).\n"
            "The DSpark/MTP draft head ships as part of the base checkpoint.\n"
        ),
        # Later commits: {revision, date, readme, changed_shards (1-based; their content is new)}.
        "later": [{
            "revision": NEXT_REVISION,
            "date": "2026-08-20T00:00:00.000Z",
            "readme": (
                "---\nlicense: mit\nlibrary_name: transformers\n---\n"
                "# DeepSeek-V4-Flash-0731\n\n"
                "DeepSeek-V4-Flash-0731 (spark-sim synthetic stand-in: random weights, not a model).\n"
                "The DSpark/MTP draft head ships as part of the base checkpoint. Shards 1-2 re-uploaded.\n"
            ),
            "changed_shards": [1, 2],
        }],
    },
    "deepseek-ai/DeepSeek-V4-Flash-DSpark": {
        "revision": "d5a1b0c4e3f2a1908f7e6d5c4b3a29180f7e6d5c",
        "date": "2026-07-04T00:00:00.000Z",
        "readme": (
            "---\nlicense: mit\n---\n# DeepSeek-V4-Flash-DSpark\n\n"
            "DeepSeek-V4-Flash with the DSpark speculative head (spark-sim synthetic stand-in).\n"
        ),
    },
    "deepseek-ai/DeepSeek-V4-Flash": {
        "revision": "0e1d2c3b4a5968778695a4b3c2d1e0f9a8b7c6d5",
        "date": "2026-06-10T00:00:00.000Z",
        "readme": (
            "---\nlicense: mit\n---\n# DeepSeek-V4-Flash\n\n"
            "We present a preview version of DeepSeek-V4-Flash (spark-sim synthetic stand-in).\n"
        ),
    },
}


# --------------------------------------------------------------------------- content


def git_blob_id(data: bytes) -> str:
    """The git blob sha1 the Hub uses as ETag for a non-LFS file: sha1(b"blob <len>\\0" + data)."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()  # nosec - git's object id, not security


def safetensors_header(name: str, nbytes: int) -> bytes:
    """A valid safetensors prefix for one U8 tensor of ``nbytes`` bytes: <u64 length><JSON header>."""
    header = json.dumps({name: {"dtype": "U8", "shape": [nbytes], "data_offsets": [0, nbytes]}}).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header


def repo_spec(spec: dict[str, Any], repo_id: str) -> dict[str, Any]:
    """The effective spec of one repo: its REPOS entry, the global knobs, its overrides."""
    merged = {k: v for k, v in REPOS[repo_id].items() if k != "later"}
    merged["shards"] = int(spec.get("shards", 6))
    merged["shard_bytes"] = int(spec.get("shard_bytes", 1 << 20))
    merged.update((spec.get("repos") or {}).get(repo_id, {}))
    merged.setdefault("changed_shards", [])
    merged.setdefault("base_revision", merged["revision"])
    return merged


def revision_specs(spec: dict[str, Any], repo_id: str) -> list[dict[str, Any]]:
    """Every commit of a repo the server holds, oldest first (the first is REPOS' revision)."""
    first = repo_spec(spec, repo_id)
    specs = [first]
    for later in REPOS[repo_id].get("later", []):
        merged = dict(first)
        merged.update(later)
        specs.append(merged)
    return specs


def small_files(repo_id: str, rspec: dict[str, Any]) -> dict[str, bytes]:
    """The repo's non-LFS files (path -> content)."""
    shards = int(rspec["shards"])
    weight_map = {}
    for index in range(1, shards + 1):
        shard = "model-%05d-of-%05d.safetensors" % (index, shards)
        weight_map["model.layers.%d.experts.weight" % (index - 1)] = shard
    weight_map["mtp.0.head.weight"] = "model-%05d-of-%05d.safetensors" % (shards, shards)
    index_json = {"metadata": {"total_size": shards * int(rspec["shard_bytes"])}, "weight_map": weight_map}
    config = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
              "num_hidden_layers": shards, "torch_dtype": "bfloat16", "_name_or_path": repo_id}
    return {
        "README.md": rspec["readme"].encode(),
        "config.json": (json.dumps(config, indent=2) + "\n").encode(),
        "generation_config.json": b'{"do_sample": true, "temperature": 0.6}\n',
        "tokenizer.json": (json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0}}}) + "\n").encode(),
        "encoding/encoding_dsv4.py": b'"""spark-sim stand-in for the DeepSeek-V4 chat encoder."""\n',
        "model.safetensors.index.json": (json.dumps(index_json, indent=2) + "\n").encode(),
    }


def write_repo(data_dir: str, repo_id: str, rspec: dict[str, Any]) -> dict[str, Any]:
    """Generate one repo's files under data_dir/<repo_id>/<revision>/; return its listing.

    Listing: {"revision", "date", "files": {path: {"size", "oid" (git blob id), "lfs": sha256|None}}}.
    """
    root = os.path.join(data_dir, repo_id, rspec["revision"])
    files: dict[str, dict[str, Any]] = {}
    for path, content in small_files(repo_id, rspec).items():
        target = os.path.join(root, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as handle:
            handle.write(content)
        files[path] = {"size": len(content), "oid": git_blob_id(content), "lfs": None}
    shards = int(rspec["shards"])
    for index in range(1, shards + 1):
        # A shard's content follows the commit that last uploaded it: unchanged shards are the same blob.
        origin = rspec["revision"] if index in rspec.get("changed_shards", []) else rspec["base_revision"]
        seed = int(hashlib.sha256(("%s@%s#%d" % (repo_id, origin, index)).encode()).hexdigest()[:16], 16)
        rng = random.Random(seed)
        path = "model-%05d-of-%05d.safetensors" % (index, shards)
        prefix = safetensors_header("model.layers.%d.experts.weight" % (index - 1), int(rspec["shard_bytes"]))
        digest = hashlib.sha256()
        with open(os.path.join(root, path), "wb") as handle:
            handle.write(prefix)
            digest.update(prefix)
            left = int(rspec["shard_bytes"])
            while left > 0:
                chunk = rng.randbytes(min(left, 1 << 22))
                handle.write(chunk)
                digest.update(chunk)
                left -= len(chunk)
        size = len(prefix) + int(rspec["shard_bytes"])
        pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (digest.hexdigest(), size)
        files[path] = {"size": size, "oid": git_blob_id(pointer.encode()), "lfs": digest.hexdigest()}
    return {"revision": rspec["revision"], "date": rspec["date"], "files": files}


# Spec knobs that change how the server answers, not what it serves (re-read live, no regeneration).
LIVE_KNOBS = ("rate_limit_bps", "total_rate_bps", "token")


def prepare(spec: dict[str, Any], data_dir: str) -> dict[str, dict[str, Any]]:
    """Generate every repo (only when the content knobs changed since the last run); return the listings."""
    content = {k: v for k, v in spec.items() if k not in LIVE_KNOBS}
    key = hashlib.sha256(json.dumps([content, REPOS], sort_keys=True).encode()).hexdigest()
    index_path = os.path.join(data_dir, "index.json")
    try:
        with open(index_path, encoding="utf-8") as handle:
            index = json.load(handle)
        if index.get("key") == key:
            return index["repos"]
    except (OSError, ValueError):
        pass
    if os.path.isdir(data_dir):
        shutil.rmtree(data_dir)
    os.makedirs(data_dir)
    repos = {repo_id: {"revisions": {r["revision"]: write_repo(data_dir, repo_id, r)
                                     for r in revision_specs(spec, repo_id)},
                       "main": revision_specs(spec, repo_id)[-1]["revision"]}
             for repo_id in REPOS}
    with open(index_path, "w", encoding="utf-8") as handle:
        json.dump({"key": key, "repos": repos}, handle)
    return repos


# --------------------------------------------------------------------------- HTTP


def tree_entries(listing: dict[str, Any], prefix: str, recursive: bool) -> list[dict[str, Any]]:
    """list_repo_tree's answer: files (and directories) under ``prefix``."""
    entries: list[dict[str, Any]] = []
    dirs: set[str] = set()
    base = prefix.strip("/")
    for path in sorted(listing["files"]):
        if base and not path.startswith(base + "/"):
            continue
        rest = path[len(base) + 1:] if base else path
        if "/" in rest and not recursive:
            dirs.add((base + "/" if base else "") + rest.split("/", 1)[0])
            continue
        if recursive:
            parts = path.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                directory = "/".join(parts[:depth])
                if not base or directory.startswith(base + "/"):
                    dirs.add(directory)
        meta = listing["files"][path]
        entry: dict[str, Any] = {"type": "file", "oid": meta["oid"], "size": meta["size"], "path": path}
        if meta["lfs"]:
            entry["lfs"] = {"oid": meta["lfs"], "size": meta["size"], "pointerSize": 134}
        entries.append(entry)
    entries.extend({"type": "directory", "oid": git_blob_id(d.encode()), "size": 0, "path": d} for d in sorted(dirs))
    return entries


def model_info(repo_id: str, listing: dict[str, Any]) -> dict[str, Any]:
    """/api/models/<repo>/revision/<rev>: what repo_info / model_info read."""
    siblings = []
    for path, meta in sorted(listing["files"].items()):
        sibling: dict[str, Any] = {"rfilename": path, "size": meta["size"], "blobId": meta["oid"]}
        if meta["lfs"]:
            sibling["lfs"] = {"sha256": meta["lfs"], "size": meta["size"], "pointerSize": 134}
        siblings.append(sibling)
    return {
        "_id": git_blob_id(repo_id.encode())[:24], "id": repo_id, "modelId": repo_id,
        "author": repo_id.split("/")[0], "sha": listing["revision"], "lastModified": listing["date"],
        "createdAt": listing["date"], "private": False, "gated": False, "disabled": False,
        "downloads": 0, "likes": 0, "tags": ["safetensors", "deepseek_v4"], "library_name": "transformers",
        "siblings": siblings, "usedStorage": sum(m["size"] for m in listing["files"].values()),
    }


class Line:
    """A shared token bucket: every connection's bytes pass through it (the line's capacity)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.next_free = 0.0

    def take(self, nbytes: int, rate: int) -> None:
        """Block until ``nbytes`` may go out at ``rate`` bytes/s over all connections (0: at once)."""
        if rate <= 0:
            return
        with self.lock:
            now = time.monotonic()
            start = max(now, self.next_free)
            self.next_free = start + nbytes / float(rate)
            wait = self.next_free - now
        if wait > 0:
            time.sleep(wait)


class Hub:
    """The repos this server answers for, and where their files are."""

    def __init__(self, repos: dict[str, dict[str, Any]], data_dir: str, rate_limit_bps: int = 0,
                 spec_path: str = "", total_rate_bps: int = 0, token: str = ""):
        self.repos = repos
        self.data_dir = data_dir
        self.rate_limit_bps = rate_limit_bps
        self.total_rate_bps = total_rate_bps
        self.token = token
        self.spec_path = spec_path
        self.spec_mtime = self._mtime()
        self.spec_lock = threading.Lock()
        self.line = Line()

    def _mtime(self) -> float:
        try:
            return os.stat(self.spec_path).st_mtime if self.spec_path else 0.0
        except OSError:
            return 0.0

    def reload(self) -> None:
        """Re-read the live knobs (rates, token) when the spec file changed.

        Under a lock: a request that arrives while another is re-reading waits for the new
        knobs instead of seeing the new mtime with the old token.
        """
        if not self.spec_path:
            return
        with self.spec_lock:
            mtime = self._mtime()
            if mtime == self.spec_mtime:
                return
            try:
                spec = load_spec(self.spec_path)
            except (OSError, ValueError):
                return
            self.rate_limit_bps = int(spec.get("rate_limit_bps", 0))
            self.total_rate_bps = int(spec.get("total_rate_bps", 0))
            self.token = str(spec.get("token", ""))
            self.spec_mtime = mtime

    def authorized(self, header: str) -> bool:
        """No token configured, or ``Authorization: Bearer <token>`` carries it."""
        return not self.token or header.strip() == "Bearer %s" % self.token

    def find(self, repo_id: str, revision: str) -> tuple[int, str, dict[str, Any] | None]:
        """(status, X-Error-Code, listing): the revision may be a commit sha or ``main`` (the latest)."""
        repo = self.repos.get(repo_id)
        if repo is None:
            return 404, "RepoNotFound", None
        listing = repo["revisions"].get(repo["main"] if revision == "main" else revision)
        if listing is None:
            return 404, "RevisionNotFound", None
        return 200, "", listing


_API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/(?P<kind>revision|tree)/(?P<rev>[^/]+)(?P<path>/.*)?$")
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")


class Handler(BaseHTTPRequestHandler):
    """HEAD/GET for the Hub routes above; everything else 404."""

    server_version = "spark-sim-hub/1"
    hub: Hub  # set on the class by make_server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - BaseHTTPRequestHandler's name
        sys.stderr.write("hub: %s %s\n" % (self.address_string(), format % args))

    def _json(self, status: int, body: Any, error_code: str = "") -> None:
        data = (json.dumps(body) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if error_code:
            self.send_header("X-Error-Code", error_code)
            self.send_header("X-Error-Message", body.get("error", ""))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        query = urllib.parse.parse_qs(url.query)
        self.hub.reload()
        if not self.hub.authorized(self.headers.get("Authorization", "")):
            self._json(401, {"error": "Access to this repo is restricted: you must be authenticated "
                             "(a valid token) to access it."}, "GatedRepo")
            return
        match = _API.match(path)
        if match:
            status, code, listing = self.hub.find(match["repo"], match["rev"])
            if listing is None:
                self._json(status, {"error": "%s: %s" % (code, match["repo"])}, code)
            elif match["kind"] == "revision":
                self._json(200, model_info(match["repo"], listing))
            else:
                recursive = (query.get("recursive") or ["false"])[0].lower() == "true"
                self._json(200, tree_entries(listing, match["path"] or "", recursive))
            return
        match = _RESOLVE.match(path)
        if match:
            self._resolve(match["repo"], match["rev"], match["path"])
            return
        self._json(404, {"error": "not found: %s" % path}, "EntryNotFound")

    def _resolve(self, repo_id: str, revision: str, path: str) -> None:
        status, code, listing = self.hub.find(repo_id, revision)
        if listing is None:
            self._json(status, {"error": "%s: %s" % (code, repo_id)}, code)
            return
        meta = listing["files"].get(path)
        if meta is None:
            self._json(404, {"error": "EntryNotFound: %s" % path}, "EntryNotFound")
            return
        size = int(meta["size"])
        start, end = 0, size - 1
        ranged = self.headers.get("Range", "")
        range_match = re.fullmatch(r"bytes=(\d+)-(\d*)", ranged.strip())
        if range_match:
            start = int(range_match[1])
            end = int(range_match[2]) if range_match[2] else size - 1
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % size)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        self.send_response(206 if range_match else 200)
        etag = meta["lfs"] or meta["oid"]
        self.send_header("X-Repo-Commit", listing["revision"])
        self.send_header("ETag", '"%s"' % etag)
        if meta["lfs"]:
            self.send_header("X-Linked-Etag", '"%s"' % etag)
            self.send_header("X-Linked-Size", str(size))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        if range_match:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
        self.end_headers()
        if self.command == "HEAD":
            return
        with open(os.path.join(self.hub.data_dir, repo_id, listing["revision"], path), "rb") as handle:
            handle.seek(start)
            self._send(handle, end - start + 1)

    def _send(self, handle: Any, length: int) -> None:
        rate = self.hub.rate_limit_bps
        total = self.hub.total_rate_bps
        slowest = min(r for r in (rate, total, 1 << 40) if r > 0)
        chunk = 1 << 20 if slowest >= 1 << 40 else max(4096, min(1 << 20, slowest // 20))
        began = time.monotonic()
        sent = 0
        while sent < length:
            data = handle.read(min(chunk, length - sent))
            if not data:
                break
            self.hub.line.take(len(data), self.hub.total_rate_bps)
            self.wfile.write(data)
            sent += len(data)
            rate = self.hub.rate_limit_bps
            if rate:
                ahead = sent / rate - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)


def load_spec(path: str) -> dict[str, Any]:
    """The spec file's content, {} when absent."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return {}


def make_server(spec: dict[str, Any], data_dir: str, address: str = DEFAULT_ADDRESS,
                port: int = DEFAULT_PORT, spec_path: str = "") -> ThreadingHTTPServer:
    """Generate the repos and return a bound (not yet serving) server (``spec_path``: re-read the live knobs)."""
    repos = prepare(spec, data_dir)
    hub = Hub(repos, data_dir, int(spec.get("rate_limit_bps", 0)), spec_path,
              int(spec.get("total_rate_bps", 0)), str(spec.get("token", "")))
    handler = type("BoundHandler", (Handler,), {"hub": hub})
    server = ThreadingHTTPServer((address, port), handler)
    server.daemon_threads = True
    return server


def serve_in_thread(spec: dict[str, Any], data_dir: str, port: int = 0,
                    spec_path: str = "") -> tuple[ThreadingHTTPServer, str]:
    """For tests: serve on 127.0.0.1:<free port> in a thread; returns (server, endpoint URL)."""
    server = make_server(spec, data_dir, DEFAULT_ADDRESS, port, spec_path)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, "http://%s:%d" % server.server_address[:2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spark-sim-hub", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", default=os.environ.get("SPARK_SIM_HUB_SPEC", DEFAULT_SPEC_PATH))
    parser.add_argument("--data", default=os.environ.get("SPARK_SIM_HUB_DATA", DEFAULT_DATA_DIR))
    parser.add_argument("--address", default=DEFAULT_ADDRESS)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    server = make_server(load_spec(args.spec), args.data, args.address, args.port, args.spec)
    sys.stderr.write("hub: serving %s on http://%s:%d\n" % (", ".join(sorted(REPOS)), args.address, args.port))
    sys.stderr.flush()
    server.serve_forever()
    return 0
