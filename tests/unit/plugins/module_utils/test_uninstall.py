# -*- coding: utf-8 -*-
"""plugins/module_utils/uninstall.py and the baseline of converged.py: what uninstall.yml removes and restores."""

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.module_utils import converged as cv
from ansible_collections.dgxspark.cluster.plugins.module_utils import uninstall as un

DPKG = "vim\t2:9.1\tinstall ok installed\nnvidia-driver-580-open\t580.173.02-1\tinstall ok installed\n" \
       "gone\t1\tdeinstall ok config-files\n"


def fake_run(calls, dpkg=DPKG):
    def run(argv):
        calls.append(argv)
        if argv[0] == "dpkg-query":
            return 0, dpkg, ""
        if argv[0] == "systemctl":
            return 0, "Id=earlyoom.service\nUnitFileState=enabled\nActiveState=active\n", ""
        return 1, "", "no"
    return run


def test_the_baseline_keeps_the_first_value_of_every_key_and_reads_only_new_ones(tmp_path):
    calls = []
    made = tmp_path / "made"
    base, added = cv.update_baseline(None, "nic", {"paths": [str(made)], "units": ["earlyoom.service"]}, fake_run(calls))
    assert base["packages"] == {"vim": "2:9.1 install ok installed",
                                "nvidia-driver-580-open": "580.173.02-1 install ok installed"}   # installed ones only
    assert base["resources"]["path:%s" % made] == "absent"
    assert base["resources"]["unit:earlyoom.service"] == "enabled active"
    # the directories on the way are recorded too (tmp_path and its parents exist: they were there before)
    assert set(added) == {"path:%s" % made, "unit:earlyoom.service"} | {"path:%s" % p for p in made.parents if str(p) != "/"}
    assert base["resources"]["path:%s" % tmp_path].startswith("dir ")
    made.write_text("the role made it\n")
    calls.clear()
    base, added = cv.update_baseline(base, "nic", {"paths": [str(made)], "trees": [str(tmp_path)],
                                                   "commands": [{"argv": ["docker", "image", "inspect", "x"]}]},
                                     fake_run(calls))
    assert base["resources"]["path:%s" % made] == "absent"              # the first value stays
    assert added == ["command:docker image inspect x", "tree:%s" % tmp_path]
    assert base["resources"]["command:docker image inspect x"] == "rc:1"
    assert [c[0] for c in calls] == ["docker"]                          # no second dpkg-query, no systemctl
    assert str(made) in base["roles"]["nic"]["paths"] and str(tmp_path) in base["roles"]["nic"]["paths"]
    assert base["roles"]["nic"]["units"] == ["earlyoom.service"]


def baseline():
    return {
        "version": 1,
        "packages": {"vim": "2:9.1 install ok installed", "nvidia-driver-580-open": "580.173.02-1 install ok installed",
                     "rsync": "3.2 install ok installed"},
        "resources": {
            "path:/etc/dgxspark": "absent", "path:/etc/dgxspark/nccl.env": "absent",
            "path:/etc/systemd/system/dgxspark-vllm.service": "absent",
            "path:/etc/ssh/sshd_config": "file 0644 0:0 sha256:aaa",
            "path:/var/lib/dgxspark/huggingface": "absent", "path:/var/lib/dgxspark/huggingface/hub": "absent",
            "path:/var/lib/dgxspark/checkpoint": "absent", "path:/var/lib/dgxspark/checkpoint/.ssh": "absent",
            "tree:/var/lib/dgxspark/huggingface/hub/models--x/blobs": "absent",
            "unit:dgxspark-vllm.service": "- inactive", "unit:earlyoom.service": "enabled active",
            "user:vllm": "absent", "group:vllm": "absent", "user:hf": "absent", "group:hf": "absent",
            "package:prometheus-node-exporter": "absent", "package:rsync": "3.2 install ok installed",
            "package:cuda-toolkit-13-3": "absent", "package:nvidia-driver-580-open": "580.173.02-1 install ok installed",
            "command:docker image inspect vllm:1": "rc:1",
        },
        "roles": {
            "preflight": {"units": ["earlyoom.service"]},
            "nic": {"paths": ["/etc/dgxspark", "/etc/dgxspark/nccl.env", "/etc/ssh/sshd_config"]},
            "service": {"paths": ["/etc/systemd/system/dgxspark-vllm.service"], "units": ["dgxspark-vllm.service"]},
            "runtime": {"users": ["vllm"], "groups": ["vllm"],
                        "commands": [{"argv": ["docker", "image", "inspect", "vllm:1"], "compare": "stdout"}]},
            "metrics": {"packages": ["prometheus-node-exporter"]},
            "checkpoint": {"paths": ["/var/lib/dgxspark/huggingface", "/var/lib/dgxspark/huggingface/hub",
                                     "/var/lib/dgxspark/checkpoint", "/var/lib/dgxspark/checkpoint/.ssh"],
                           "trees": ["/var/lib/dgxspark/huggingface/hub/models--x/blobs"], "users": ["hf"],
                           "groups": ["hf"], "packages": ["rsync"]},
            "driver": {"packages": ["nvidia-driver-580-open"]},
            "cuda": {"packages": ["cuda-toolkit-13-3"]},
        },
    }


CURRENT = {
    "path:/etc/dgxspark": "dir 0755 0:0", "path:/etc/dgxspark/nccl.env": "file 0644 0:0 sha256:bbb",
    "path:/etc/systemd/system/dgxspark-vllm.service": "file 0644 0:0 sha256:ccc",
    "path:/etc/ssh/sshd_config": "file 0644 0:0 sha256:ddd",
    "path:/var/lib/dgxspark/huggingface": "dir 0755 0:0", "path:/var/lib/dgxspark/huggingface/hub": "dir 0755 0:0",
    "path:/var/lib/dgxspark/huggingface/hub/models--x/blobs": "dir 0755 999:999",
    "unit:dgxspark-vllm.service": "enabled active", "unit:earlyoom.service": "masked inactive",
    "path:/var/lib/dgxspark/checkpoint": "dir 0750 999:999", "path:/var/lib/dgxspark/checkpoint/.ssh": "dir 0700 999:999",
    "user:vllm": "uid:998 gid:998 home:/opt/dgxspark/vllm shell:/usr/sbin/nologin", "group:vllm": "gid:998",
    "user:hf": "uid:999 gid:999 home:/var/lib/dgxspark/checkpoint shell:/bin/sh", "group:hf": "gid:999",
    "command:docker image inspect vllm:1": "rc:0",
}
INSTALLED = {"vim": "2:9.1 install ok installed", "nvidia-driver-580-open": "580.173.02-1 hold ok installed",
             "rsync": "3.2 install ok installed", "prometheus-node-exporter": "1.9 install ok installed",
             "cuda-toolkit-13-3": "13.3 hold ok installed"}


def test_the_plan_removes_what_the_collection_made_and_keeps_what_the_node_had():
    steps = un.plan(baseline(), CURRENT, INSTALLED)
    assert steps["stop_units"] == ["dgxspark-vllm.service"]
    assert steps["restore_units"] == [{"unit": "earlyoom.service", "unit_file_state": "enabled", "active": True,
                                       "was": "enabled active", "now": "masked inactive"}]
    # deepest first; the checkpoint and the directories holding it stay; sshd_config was there: left, named
    # the kept checkpoint user keeps its home; what the collection put in it goes
    assert steps["remove_paths"] == ["/var/lib/dgxspark/checkpoint/.ssh", "/etc/systemd/system/dgxspark-vllm.service",
                                     "/etc/dgxspark/nccl.env", "/etc/dgxspark"]
    kept = {k["item"]: k["why"] for k in steps["kept"]}
    assert set(kept) == {"/var/lib/dgxspark/huggingface/hub/models--x/blobs", "/var/lib/dgxspark/huggingface/hub",
                         "/var/lib/dgxspark/huggingface", "/var/lib/dgxspark/checkpoint", "user hf", "group hf",
                         "package cuda-toolkit-13-3"}
    assert kept["/var/lib/dgxspark/checkpoint"] == "the home of hf, who stays with the checkpoint"
    assert [x["item"] for x in steps["left"]] == ["/etc/ssh/sshd_config"]
    assert steps["remove_users"] == ["vllm"] and steps["remove_groups"] == ["vllm"]
    assert steps["purge"] == ["prometheus-node-exporter"]           # rsync was there; CUDA is protected
    assert steps["unhold"] == ["cuda-toolkit-13-3", "nvidia-driver-580-open"]
    assert steps["remove_images"] == ["vllm:1"]


def test_with_packages_and_checkpoint_everything_the_collection_made_goes():
    steps = un.plan(baseline(), CURRENT, INSTALLED, packages=True, checkpoint=True)
    assert steps["purge"] == ["cuda-toolkit-13-3", "prometheus-node-exporter"]
    assert steps["unhold"] == ["nvidia-driver-580-open"]             # the driver was there before: stays, released
    assert "/var/lib/dgxspark/huggingface" in steps["remove_paths"] and steps["remove_users"] == ["hf", "vllm"]
    assert "/var/lib/dgxspark/checkpoint" in steps["remove_paths"]
    assert steps["remove_paths"].index("/var/lib/dgxspark/huggingface/hub/models--x/blobs") < \
        steps["remove_paths"].index("/var/lib/dgxspark/huggingface")
    assert [k["item"] for k in steps["kept"]] == []


def test_a_second_plan_after_the_uninstall_has_nothing_to_do():
    after = {k: ("absent" if k.startswith(("path:", "user:", "group:")) else v) for k, v in CURRENT.items()}
    after.update({"unit:dgxspark-vllm.service": "- inactive", "unit:earlyoom.service": "enabled active",
                  "command:docker image inspect vllm:1": "rc:1"})
    steps = un.plan(baseline(), after, {"vim": "2:9.1 install ok installed",
                                        "nvidia-driver-580-open": "580.173.02-1 install ok installed",
                                        "rsync": "3.2 install ok installed"}, packages=True, checkpoint=True)
    assert all(not steps[k] for k in ("stop_units", "restore_units", "remove_paths", "remove_users", "remove_groups",
                                      "purge", "unhold", "remove_images"))


def test_autoremove_parses_apts_simulation():
    text = "NOTE: This is only a simulation!\nPurg prometheus-node-exporter [1.9.0-1]\nPurg libpcap0.8t64:arm64 [1.10]\n" \
           "Remv x [1]\nInst y\n"
    assert un.parse_autoremove(text) == ["libpcap0.8t64", "prometheus-node-exporter", "x"]


def test_the_report_names_the_node_and_what_stays():
    steps = un.plan(baseline(), CURRENT, INSTALLED)
    lines = un.summary("spark-head", steps, True)
    assert "spark-head: would purge the packages: prometheus-node-exporter" in lines
    assert "spark-head: would restore: earlyoom.service to enabled" in lines
    assert any(line.startswith("spark-head: kept user hf (owns the checkpoint") for line in lines)
    assert un.summary("spark-worker", {}, False) == ["spark-worker: nothing the collection installed is left"]


def test_a_baseline_of_the_wrong_shape_is_named_not_planned():
    assert un.shape_problem(baseline()) is None
    assert un.shape_problem([]) == "not a baseline of version 1"
    assert un.shape_problem(dict(baseline(), version=2)) == "not a baseline of version 1"
    assert un.shape_problem(dict(baseline(), roles={"nic": ["/etc/x"]})) == "roles.nic is not a mapping"
    assert un.shape_problem(dict(baseline(), resources=["path:/x"])) == "resources is not a mapping"
    assert un.shape_problem(dict(baseline(), packages=["vim"])) == "packages is not a mapping"
