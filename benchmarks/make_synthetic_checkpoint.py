# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write a synthetic checkpoint in Hugging Face cache layout (run on the sim head by checkpoint_sync.yml).

    python3 make_synthetic_checkpoint.py REPO_DIR SHARDS TOTAL_BYTES OWNER

REPO_DIR/blobs/<sha256> (random, incompressible shards), REPO_DIR/snapshots/<rev>/
(relative symlinks, model.safetensors.index.json, config.json), REPO_DIR/refs/main.
Prints {"revision", "bytes", "files"} as JSON.
"""

import hashlib
import json
import os
import pwd
import random
import shutil
import sys


def main(argv):
    repo, shards, total, owner = argv[0], int(argv[1]), int(argv[2]), argv[3]
    if os.path.isdir(repo):
        shutil.rmtree(repo)
    revision = hashlib.sha1(("%s/%d/%d" % (repo, shards, total)).encode()).hexdigest()
    blobs = os.path.join(repo, "blobs")
    snap = os.path.join(repo, "snapshots", revision)
    os.makedirs(blobs)
    os.makedirs(snap)
    rng = random.Random(total * 1000 + shards)
    per = total // shards
    names = ["model-%05d-of-%05d.safetensors" % (i, shards) for i in range(1, shards + 1)]
    written = 0
    for name in names:
        digest = hashlib.sha256()
        tmp = os.path.join(blobs, "tmp")
        with open(tmp, "wb") as handle:
            left = per
            while left:
                chunk = rng.randbytes(min(left, 1 << 23))
                handle.write(chunk)
                digest.update(chunk)
                left -= len(chunk)
        os.rename(tmp, os.path.join(blobs, digest.hexdigest()))
        os.symlink("../../blobs/" + digest.hexdigest(), os.path.join(snap, name))
        written += per
    small = {"model.safetensors.index.json": json.dumps({"weight_map": {"w%d" % i: n for i, n in enumerate(names)}}),
             "config.json": json.dumps({"architectures": ["DeepseekV4ForCausalLM"]})}
    for name, text in small.items():
        data = text.encode()
        blob = hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()
        with open(os.path.join(blobs, blob), "wb") as handle:
            handle.write(data)
        os.symlink("../../blobs/" + blob, os.path.join(snap, name))
        written += len(data)
    os.makedirs(os.path.join(repo, "refs"))
    with open(os.path.join(repo, "refs", "main"), "w") as handle:
        handle.write(revision)
    entry = pwd.getpwnam(owner)
    for base, dirs, files in os.walk(repo):
        for name in dirs + files:
            os.lchown(os.path.join(base, name), entry.pw_uid, entry.pw_gid)
    os.chown(repo, entry.pw_uid, entry.pw_gid)
    print(json.dumps({"revision": revision, "bytes": written, "files": len(names) + len(small)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
