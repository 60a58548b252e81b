# -*- coding: utf-8 -*-
"""The static fabric knobs have one owner: the preflight (roles/preflight/tasks/knobs.yml, run by
ansible-playbook with the preflight's real defaults and vars) stops a run whose runtime_vllm_env sets a key
that nic_nccl_static_env sets too, since the ranks read the nic resolver's file after vllm.env and the
runtime_vllm_env value would never reach them. Other keys (NCCL_DEBUG) pass."""

from __future__ import annotations

import os

import roleplay

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
KNOBS = [{"name": "Resolve and check the knobs",
          "ansible.builtin.include_tasks": os.path.join(ROOT, "roles", "preflight", "tasks", "knobs.yml")}]
PAIR = {"preflight_topology": {"shape": "direct", "nnodes": 2}}  # the fact preflight's main.yml sets first


def test_a_fabric_knob_in_runtime_vllm_env_stops_the_run(tmp_path):
    proc = roleplay.run_role_play(tmp_path, "preflight", KNOBS,
                                  dict(PAIR, runtime_vllm_env={"NCCL_DEBUG": "INFO", "NCCL_NET": "Socket", "NCCL_CROSS_NIC": "0"}))
    assert proc.returncode != 0, proc.stdout[-3000:]
    out = " ".join(proc.stdout.split())
    assert "localhost: runtime_vllm_env sets NCCL_CROSS_NIC, NCCL_NET, which nic_nccl_static_env sets too" in out, out[-3000:]
    assert "Expected NCCL_CROSS_NIC, NCCL_NET in nic_nccl_static_env only" in out
    assert "NCCL_DEBUG" not in out.split("runtime_vllm_env sets", 1)[1].split("which", 1)[0]


def test_other_keys_and_the_nic_role_own_knobs_pass(tmp_path):
    # nic_nccl_static_env set in the inventory is read too: a key moved there from runtime_vllm_env passes
    proc = roleplay.run_role_play(tmp_path, "preflight", KNOBS,
                                  dict(PAIR, runtime_vllm_env={"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": 4},
                                       nic_nccl_static_env={"NCCL_NET": "IB", "NCCL_SOCKET_NTHREADS": "4"}))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "Check runtime_vllm_env leaves the static fabric knobs to nic_nccl_static_env" in proc.stdout
    proc = roleplay.run_role_play(tmp_path, "preflight", KNOBS,
                                  dict(PAIR, runtime_vllm_env={"NCCL_SOCKET_NTHREADS": "8"},
                                       nic_nccl_static_env={"NCCL_NET": "IB", "NCCL_SOCKET_NTHREADS": "4"}))
    assert proc.returncode != 0 and "runtime_vllm_env sets NCCL_SOCKET_NTHREADS, which" in " ".join(proc.stdout.split())


def test_three_nodes_need_the_pad(tmp_path):
    """Issue 28: TP=3 without the attention-group pad stops; with it, a switch and a triangle of cables pass (the
    triangle's bootstrap network is the topology's to require, test_topology.py)."""
    switch3 = {"preflight_topology": {"shape": "switch", "nnodes": 3}}
    proc = roleplay.run_role_play(tmp_path, "preflight", KNOBS, switch3)
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0 and "localhost: tensor parallel 3 (3 nodes) does not divide the 8 attention groups" in out, out[-3000:]
    proc = roleplay.run_role_play(tmp_path, "preflight", KNOBS, dict(switch3, runtime_vllm_attention_group_pad=True))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    proc = roleplay.run_role_play(tmp_path, "preflight", KNOBS, {"preflight_topology": {"shape": "direct", "nnodes": 3},
                                                                 "runtime_vllm_attention_group_pad": True})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    proc = roleplay.run_role_play(tmp_path, "preflight", KNOBS, {"preflight_topology": {"shape": "switch", "nnodes": 4}})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
