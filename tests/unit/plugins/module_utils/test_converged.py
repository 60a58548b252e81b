# -*- coding: utf-8 -*-
"""Unit tests for plugins/module_utils/converged.py: snapshots, stamps, drift, the content digest."""

from __future__ import annotations

import os

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import converged as cv

# `dpkg-query -W -f '${binary:Package}\t${Version}\t${Status}\n' ...` on a node (one held, one installed)
DPKG = "nvidia-driver-580-open:arm64\t580.173.02-0ubuntu1\thold ok installed\nethtool\t1:6.14.2-1\tinstall ok installed\n"
# `systemctl show -p Id,UnitFileState,ActiveState -- a b` (systemd prints blank-line separated blocks)
SYSTEMCTL = (
    "ActiveState=active\nUnitFileState=enabled\nId=dgxspark-vllm.service\n\n"
    "ActiveState=inactive\nUnitFileState=disabled\nId=dgxspark-clock-cap.service\n"
)


class FakeRunner:
    """run_command stand-in: answers by argv[0], records what it was asked."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def __call__(self, argv):
        self.calls.append(argv)
        answer = self.answers[argv[0]]
        return answer(argv) if callable(answer) else answer


def runner(**extra):
    answers = {"dpkg-query": (0, DPKG, ""), "systemctl": (0, SYSTEMCTL, "")}
    answers.update(extra)
    return FakeRunner(answers)


def test_digest_is_canonical():
    assert cv.digest({"a": 1, "b": [1, 2]}) == cv.digest({"b": [1, 2], "a": 1})
    assert cv.digest({"a": 1}) != cv.digest({"a": "1"})


def test_parse_dpkg_query_strips_the_architecture():
    assert cv.parse_dpkg_query(DPKG) == {
        "nvidia-driver-580-open": "580.173.02-0ubuntu1 hold ok installed",
        "ethtool": "1:6.14.2-1 install ok installed",
    }


def test_parse_systemctl_show_blocks():
    assert cv.parse_systemctl_show(SYSTEMCTL) == {
        "dgxspark-vllm.service": "enabled active",
        "dgxspark-clock-cap.service": "disabled inactive",
    }


@pytest.mark.parametrize(
    "resources, message",
    [
        ([], "must be a mapping"),
        ({"files": []}, "unknown resource kind(s) files"),
        ({"paths": "/etc"}, "resources.paths must be a list"),
        ({"paths": ["etc/x"]}, "absolute paths"),
        ({"units": [""]}, "non-empty strings"),
        ({"commands": [["ls"]]}, "{argv: [...], compare: stdout|rc}"),
        ({"commands": [{"argv": ["ls"], "compare": "stderr"}]}, "compare must be stdout or rc"),
    ],
)
def test_normalize_resources_rejects_bad_shapes(resources, message):
    with pytest.raises(cv.ConvergedError, match=None) as err:
        cv.normalize_resources(resources)
    assert message in str(err.value)


def test_read_path_kinds(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    os.chmod(f, 0o640)
    link = tmp_path / "l"
    link.symlink_to("f")
    assert cv.read_path(str(tmp_path / "missing")) == "absent"
    line = cv.read_path(str(f))
    assert line.startswith("file 0640 %d:%d sha256:" % (os.getuid(), os.getgid()))
    assert line.endswith("2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881")
    assert cv.read_path(str(link)).endswith("-> f")
    assert cv.read_path(str(tmp_path)).startswith("dir ")


def test_read_path_large_file_uses_size_and_mtime(tmp_path, monkeypatch):
    monkeypatch.setattr(cv, "HASH_LIMIT", 3)
    f = tmp_path / "big"
    f.write_text("0123456789")
    assert " size:10 mtime:" in cv.read_path(str(f))


def _resources(tmp_path):
    (tmp_path / "tree" / "sub").mkdir(parents=True)
    (tmp_path / "tree" / "sub" / "a").write_text("a")
    (tmp_path / "conf").write_text("k=v\n")
    return {
        "paths": [str(tmp_path / "conf"), str(tmp_path / "absent")],
        "trees": [str(tmp_path / "tree")],
        "packages": ["nvidia-driver-580-open", "not-installed"],
        "units": ["dgxspark-vllm.service", "dgxspark-clock-cap.service"],
        "users": ["root", "no-such-user-here"],
        "groups": ["root"],
        "commands": [{"argv": ["show_gids"], "compare": "stdout"}, {"argv": ["check"], "compare": "rc"}],
    }


def test_snapshot_reads_every_kind(tmp_path):
    run = runner(show_gids=(0, "GID table\n", ""), check=(0, "varies %d" % os.getpid(), ""))
    snap = cv.snapshot(_resources(tmp_path), run)
    assert snap["path:%s/absent" % tmp_path] == "absent"
    assert snap["tree:%s/tree:sub/a" % tmp_path].startswith("file ")
    assert snap["package:nvidia-driver-580-open"] == "580.173.02-0ubuntu1 hold ok installed"
    assert snap["package:not-installed"] == "absent"
    assert snap["unit:dgxspark-clock-cap.service"] == "disabled inactive"
    assert snap["user:root"].startswith("uid:0 gid:0 ")
    assert snap["user:no-such-user-here"] == "absent"
    assert snap["group:root"].startswith("gid:0 ")
    assert snap["command:check"] == "rc:0"
    assert snap["command:show_gids"].startswith("rc:0 stdout:")
    # one dpkg-query and one systemctl call for all packages and units
    assert [c[0] for c in run.calls].count("dpkg-query") == 1
    assert [c[0] for c in run.calls].count("systemctl") == 1


def test_stamp_round_trip_and_drift(tmp_path):
    res = _resources(tmp_path)
    gids = {"out": "GID table\n"}
    run = runner(show_gids=lambda argv: (0, gids["out"], ""), check=(0, "", ""))
    stamp = cv.make_stamp("nic", "inputs-1", res, cv.snapshot(res, run))
    assert cv.check_stamp(stamp, "nic", "inputs-1", run) == (True, [])

    ok, why = cv.check_stamp(stamp, "nic", "inputs-2", run)
    assert not ok and "inputs changed" in why[0]

    gids["out"] = "GID table, reshuffled at boot\n"
    (tmp_path / "conf").write_text("k=w\n")
    (tmp_path / "tree" / "sub" / "new").write_text("n")
    ok, why = cv.check_stamp(stamp, "nic", "inputs-1", run)
    assert not ok
    text = "\n".join(why)
    assert "nic: command:show_gids: was rc:0 stdout:" in text
    assert "path:%s/conf: was file" % tmp_path in text
    assert "tree:%s/tree:sub/new: was not recorded, now file" % tmp_path in text


def test_check_stamp_without_or_with_a_foreign_stamp():
    run = runner()
    assert cv.check_stamp(None, "nic", "x", run) == (False, ["nic: no stamp (no complete run recorded on this node)"])
    assert not cv.check_stamp({}, "nic", "x", run)[0]
    assert not cv.check_stamp({"version": cv.STAMP_VERSION, "role": "driver", "inputs": "x"}, "nic", "x", run)[0]


def test_a_failing_command_is_drift_not_a_crash(tmp_path):
    res = {"commands": [{"argv": ["check"], "compare": "rc"}]}
    state = {"rc": 0}
    run = runner(check=lambda argv: (state["rc"], "", ""))
    stamp = cv.make_stamp("service", "i", res, cv.snapshot(res, run))
    state["rc"] = 1
    assert cv.check_stamp(stamp, "service", "i", run) == (False, ["service: command:check: was rc:0, now rc:1"])


def test_a_missing_program_is_drift_not_a_crash():
    """run_command raises for a program that is gone (the module passes handle_exceptions=False): rc 127."""
    res = {"commands": [{"argv": ["/opt/gone/bin/python", "-V"], "compare": "stdout"}]}
    stamp = cv.make_stamp("checkpoint", "i", res, {"command:/opt/gone/bin/python -V": "rc:0 stdout:x"})

    def gone(argv):
        raise FileNotFoundError(2, "No such file or directory", argv[0])

    ok, why = cv.check_stamp(stamp, "checkpoint", "i", runner(**{"/opt/gone/bin/python": gone}))
    assert not ok and why[0].startswith("checkpoint: command:/opt/gone/bin/python -V: was rc:0 stdout:x, now rc:127 stdout:")


def test_compare_limits_the_report():
    lines = cv.compare({str(i): "a" for i in range(15)}, {}, limit=10)
    assert len(lines) == 11 and lines[-1] == "... and 5 more"


def test_stamp_files(tmp_path):
    path = cv.stamp_path(str(tmp_path), "nic")
    assert cv.load_stamp(path) is None
    open(path, "w").write("{not json")
    assert cv.load_stamp(path) == {}
    stamp = cv.make_stamp("nic", "i", {}, {})
    open(path, "w").write(cv.dump_stamp(stamp))
    assert cv.load_stamp(path) == stamp


def test_content_digest_follows_the_files(tmp_path):
    (tmp_path / "roles" / "r" / "tasks").mkdir(parents=True)
    (tmp_path / "plugins" / "__pycache__").mkdir(parents=True)
    main = tmp_path / "roles" / "r" / "tasks" / "main.yml"
    main.write_text("- a\n")
    first = cv.content_digest(str(tmp_path))
    (tmp_path / "plugins" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    (tmp_path / "other.txt").write_text("not part of it")
    assert cv.content_digest(str(tmp_path)) == first
    main.write_text("- b\n")
    assert cv.content_digest(str(tmp_path)) != first
