# -*- coding: utf-8 -*-
"""vLLM's --revision follows checkpoint_revision (roles/runtime/vars/main.yml): a pin change that sets only
checkpoint_revision moves the rendered command, DSPARK_REVISION and the offline flag's record match with it;
runtime_vllm_revision set explicitly (or "") still wins. Evaluated by ansible-playbook on localhost with the
role's real defaults and vars, and the filter that builds the command."""

from __future__ import annotations

import base64
import json
import os

import yaml

import roleplay

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MODEL = "deepseek-ai/DeepSeek-V4-Flash-0731"
NEXT = "4c7d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d"
OTHER = "0123456789abcdef0123456789abcdef01234567"
with open(os.path.join(ROOT, "roles/checkpoint/defaults/main.yml"), encoding="utf-8") as _handle:
    PIN = yaml.safe_load(_handle)["checkpoint_revision"]
ARGV = ("{{ __runtime_vllm_knobs | dgxspark.cluster.vllm_serve_argv(topology={'role': 'head', 'node_rank': 0, "
        "'nnodes': 2, 'master_addr': '192.168.100.1'}, command=[], runtime_kind='container') }}")


def record(revision):
    data = {"repo_id": MODEL, "revision": revision, "verified_all": True, "nodes": ["spark-head", "spark-worker"],
            "hub_cache": "/srv/hub", "fingerprint": "f" * 64}
    return {"content": base64.b64encode(json.dumps(data).encode()).decode()}


# name, variables, the --revision expected (None: no flag), offline with a record of that revision
CASES = [
    ("nothing set: the checkpoint role's pin", {}, PIN),
    ("a pin change that sets only checkpoint_revision", {"checkpoint_revision": NEXT}, NEXT),
    ("runtime_vllm_revision set explicitly wins", {"checkpoint_revision": NEXT, "runtime_vllm_revision": OTHER}, OTHER),
    ("runtime_vllm_revision empty leaves the flag out", {"checkpoint_revision": NEXT, "runtime_vllm_revision": ""}, None),
]


def test_vllm_revision_follows_checkpoint_revision(tmp_path):
    assert PIN != NEXT and len(PIN) == 40
    tasks = []
    for name, variables, expected in CASES:
        argv_check = ("'--revision' not in argv" if expected is None else
                      "argv[argv.index('--revision') + 1] == '%s' and argv.count('--revision') == 1" % expected)
        that = [argv_check, "__runtime_dspark_env.DSPARK_REVISION == '%s'" % (expected or "")]
        if expected:
            that += ["__runtime_checkpoint_verified | bool"]
        tasks.append({"name": name, "vars": dict(variables, argv=ARGV,
                                                 __runtime_checkpoint_record_read=record(expected or PIN)),
                      "ansible.builtin.assert": {"that": that, "quiet": True,
                                                 "fail_msg": "%s: argv {{ argv }}, DSPARK_REVISION "
                                                             "{{ __runtime_dspark_env.DSPARK_REVISION }}" % name}})
    tasks.append({"name": "a record of the old pin after a change that set only checkpoint_revision keeps vLLM online",
                  "vars": {"checkpoint_revision": NEXT, "__runtime_checkpoint_record_read": record(PIN)},
                  "ansible.builtin.assert": {"that": ["not (__runtime_hf_hub_offline | bool)"], "quiet": True}})
    roleplay.run_role_tasks(tmp_path, "runtime", tasks)
