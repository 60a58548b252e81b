# -*- coding: utf-8 -*-
"""The Hugging Face Hub stand-in (sim/node/usr/lib/spark-sim/sparksim/hub.py), over real HTTP on loopback."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import urllib.error
import urllib.request

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "sim", "node", "usr", "lib", "spark-sim"))

from sparksim import hub  # noqa: E402

REPO = "deepseek-ai/DeepSeek-V4-Flash-0731"
REV = hub.PINNED_REVISION


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    server, url = hub.serve_in_thread({"shards": 3, "shard_bytes": 4096}, str(tmp_path_factory.mktemp("hub")))
    yield url
    server.shutdown()


def get(url, method="GET", headers=None):
    request = urllib.request.Request(url, method=method, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, dict(response.headers), response.read()


def test_revision_info(endpoint):
    status, _headers, body = get("%s/api/models/%s/revision/%s" % (endpoint, REPO, REV))
    info = json.loads(body)
    assert status == 200 and info["sha"] == REV and info["lastModified"].startswith("2026-08-01")
    names = {s["rfilename"] for s in info["siblings"]}
    assert "model-00003-of-00003.safetensors" in names and "encoding/encoding_dsv4.py" in names


def test_tree_lists_sizes_and_lfs_sha256(endpoint):
    _status, _headers, body = get("%s/api/models/%s/tree/%s?recursive=true" % (endpoint, REPO, REV))
    entries = {e["path"]: e for e in json.loads(body)}
    shard = entries["model-00001-of-00003.safetensors"]
    assert shard["type"] == "file" and len(shard["lfs"]["oid"]) == 64 and shard["size"] > 4096
    assert entries["encoding"]["type"] == "directory"
    assert "lfs" not in entries["config.json"]


def test_resolve_serves_content_matching_its_etag(endpoint):
    url = "%s/%s/resolve/%s/model-00002-of-00003.safetensors" % (endpoint, REPO, REV)
    _status, head, _body = get(url, method="HEAD")
    assert head["X-Repo-Commit"] == REV
    etag = head["X-Linked-Etag"].strip('"')
    _status, _headers, body = get(url)
    assert hashlib.sha256(body).hexdigest() == etag and int(head["X-Linked-Size"]) == len(body)
    status, headers, part = get(url, headers={"Range": "bytes=100-"})
    assert status == 206 and part == body[100:] and headers["Content-Range"].endswith("/%d" % len(body))


def test_small_file_etag_is_its_git_blob_id(endpoint):
    _status, head, body = get("%s/%s/resolve/%s/config.json" % (endpoint, REPO, REV))
    assert head["ETag"].strip('"') == hub.git_blob_id(body)


@pytest.mark.parametrize("path, code", [
    ("/api/models/deepseek-ai/Nope/revision/main", "RepoNotFound"),
    ("/api/models/%s/revision/%s" % (REPO, "1" * 40), "RevisionNotFound"),
    ("/%s/resolve/%s/missing.bin" % (REPO, REV), "EntryNotFound"),
])
def test_errors_carry_the_hub_error_codes(endpoint, path, code):
    with pytest.raises(urllib.error.HTTPError) as error:
        get(endpoint + path)
    assert error.value.code == 404 and error.value.headers["X-Error-Code"] == code


def test_lookalikes_are_told_apart_by_date_and_readme(endpoint):
    dspark = json.loads(get("%s/api/models/deepseek-ai/DeepSeek-V4-Flash-DSpark/revision/main" % endpoint)[2])
    assert dspark["lastModified"].startswith("2026-07-04")
    preview = get("%s/deepseek-ai/DeepSeek-V4-Flash/resolve/main/README.md" % endpoint)[2]
    assert b"We present a preview version" in preview


def test_content_is_deterministic(tmp_path):
    first = hub.prepare({"shards": 2, "shard_bytes": 100}, str(tmp_path / "a"))
    second = hub.prepare({"shards": 2, "shard_bytes": 100}, str(tmp_path / "b"))
    assert first == second


def test_a_second_commit_shares_the_unchanged_shards(tmp_path):
    repos = hub.prepare({"shards": 4, "shard_bytes": 1000}, str(tmp_path))
    revisions = repos[REPO]["revisions"]
    assert set(revisions) == {REV, hub.NEXT_REVISION} and repos[REPO]["main"] == hub.NEXT_REVISION
    old, new = revisions[REV]["files"], revisions[hub.NEXT_REVISION]["files"]
    changed = sorted(p for p in old if old[p]["lfs"] and old[p]["lfs"] != new[p]["lfs"])
    assert changed == ["model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors"]
    assert old["README.md"]["oid"] != new["README.md"]["oid"] and old["config.json"] == new["config.json"]


def test_the_token_is_required_when_set_and_the_line_is_shared(tmp_path):
    spec_path = tmp_path / "spec.json"
    spec = {"shards": 2, "shard_bytes": 200000, "token": "hf_test"}
    spec_path.write_text(json.dumps(spec))
    server, url = hub.serve_in_thread(spec, str(tmp_path / "data"), spec_path=str(spec_path))
    try:
        info = "%s/api/models/%s/revision/%s" % (url, REPO, REV)
        with pytest.raises(urllib.error.HTTPError) as denied:
            get(info)
        assert denied.value.code == 401 and denied.value.headers["X-Error-Code"] == "GatedRepo"
        assert get(info, headers={"Authorization": "Bearer hf_test"})[0] == 200
        # Live knobs: no token, and a 1 MB/s line shared by two parallel downloads (~0.4 MB in ~0.4 s).
        spec_path.write_text(json.dumps(dict(spec, token="", total_rate_bps=1000000)))
        os.utime(spec_path, (1, 1))
        import threading
        import time
        shard = "%s/%s/resolve/%s/model-0000%%d-of-00002.safetensors" % (url, REPO, REV)
        began = time.monotonic()
        threads = [threading.Thread(target=get, args=(shard % i,)) for i in (1, 2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert time.monotonic() - began >= 0.3
    finally:
        server.shutdown()
