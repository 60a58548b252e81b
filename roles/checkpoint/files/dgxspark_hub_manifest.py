# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ask the hub what a pinned revision holds, before downloading it (checkpoint role, head only).

    python dgxspark_hub_manifest.py REPO_ID REVISION

Runs with the tools venv's python (huggingface_hub). Reads HF_ENDPOINT and
HF_TOKEN from the environment (never from argv). Prints one JSON object::

    {"repo_id": "deepseek-ai/DeepSeek-V4-Flash-0731", "revision": "<sha>",
     "last_modified": "2026-08-01T00:00:00+00:00", "readme_head": "<first 64 KiB of README.md>",
     "total_bytes": 166900000000,
     "files": {"model-00001-of-00048.safetensors": {"size": 3460000000, "blob": "<sha256>", "lfs": true}, ...}}

Exit 2 with a one-line reason on stderr when the repo or the revision does
not exist or the hub cannot be reached.
"""

from __future__ import annotations

import json
import sys
import tempfile


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: dgxspark_hub_manifest.py REPO_ID REVISION\n")
        return 2
    repo_id, revision = argv
    try:
        from huggingface_hub import HfApi, hf_hub_download
        from huggingface_hub.hf_api import RepoFile
    except ImportError as error:
        sys.stderr.write("huggingface_hub is not installed in this python: %s\n" % error)
        return 2
    api = HfApi()
    try:
        info = api.model_info(repo_id, revision=revision)
        files = {}
        for item in api.list_repo_tree(repo_id, revision=info.sha, recursive=True):
            if not isinstance(item, RepoFile):
                continue
            lfs = item.lfs is not None
            files[item.path] = {"size": int(item.size), "lfs": lfs,
                                "blob": item.lfs.sha256 if lfs else item.blob_id}
        readme = ""
        if "README.md" in files:
            with tempfile.TemporaryDirectory() as tmp:
                path = hf_hub_download(repo_id, "README.md", revision=info.sha, cache_dir=tmp)
                with open(path, "rb") as handle:
                    readme = handle.read(65536).decode("utf-8", "replace")
    except Exception as error:  # the hub's errors: RepositoryNotFound, RevisionNotFound, HTTP, network
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        sys.stderr.write("%s @ %s: %s: %s\n" % (repo_id, revision, type(error).__name__, first))
        return 2
    modified = info.last_modified.isoformat() if info.last_modified else None
    json.dump({"repo_id": repo_id, "revision": info.sha, "last_modified": modified, "readme_head": readme,
               "total_bytes": sum(f["size"] for f in files.values()), "files": files}, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
