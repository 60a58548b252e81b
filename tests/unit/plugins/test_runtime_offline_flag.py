# -*- coding: utf-8 -*-
"""The runtime's HF_HUB_OFFLINE comes from the record the checkpoint role leaves on the node
(roles/runtime/vars/main.yml), not from a fact of a play that may not have run: a tag-limited run
(--tags runtime, service) then renders what a full run renders. Evaluated by ansible-playbook on
localhost with the role's real defaults and vars."""

from __future__ import annotations

import base64
import json

import roleplay


REV = "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
MODEL = "deepseek-ai/DeepSeek-V4-Flash-0731"


def record(**over):
    data = {"repo_id": MODEL, "revision": REV, "verified_all": True, "nodes": ["spark-head", "spark-worker"],
            "hub_cache": "/srv/hub", "fingerprint": "f" * 64}
    data.update(over)
    return {"content": base64.b64encode(json.dumps(data).encode()).decode()}


CASES = [
    ("the record names the served model and revision", {"__runtime_checkpoint_record_read": record()}, True),
    ("no record (the checkpoint role never verified every node)", {"__runtime_checkpoint_record_read": {}}, False),
    ("a record of another revision (a pin change not verified yet)",
     {"__runtime_checkpoint_record_read": record(revision="4c7d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d")}, False),
    ("a withheld record", {"__runtime_checkpoint_record_read": record(verified_all=False)}, False),
    ("the checkpoint role disabled", {"__runtime_checkpoint_record_read": record(), "checkpoint_enabled": False}, False),
    ("the knob overrides", {"__runtime_checkpoint_record_read": record(), "runtime_vllm_hf_hub_offline": False}, False),
    ("a stale fact of another play does not count",
     {"__runtime_checkpoint_record_read": {}, "checkpoint_verified_all": True}, False),
]


def test_offline_flag_follows_the_node_record(tmp_path):
    tasks = []
    for name, variables, expected in CASES:
        tasks.append({"name": name, "vars": variables, "ansible.builtin.assert": {
            "that": ["(__runtime_hf_hub_offline | bool) == %s" % expected], "quiet": True,
            "fail_msg": "%s: got {{ __runtime_hf_hub_offline }}" % name}})
    tasks.append({"name": "the hub cache follows the record too", "vars": {"__runtime_checkpoint_record_read": record()},
                  "ansible.builtin.assert": {"that": ["__runtime_hub_cache == '/srv/hub'"], "quiet": True}})
    roleplay.run_role_tasks(tmp_path, "runtime", tasks)
