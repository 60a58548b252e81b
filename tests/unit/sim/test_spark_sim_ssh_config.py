"""sim/spark-sim's ssh_config shares one ssh connection per node (the tests' thousands of short commands), with a
control socket path ssh can create: the sim's own ssh directory when it is short enough, else a private directory
of this user; no sharing when that directory is not private."""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest

from test_spark_sim_fault import load_cli


@pytest.fixture(scope="module")
def cli():
    return load_cli()


def fake_sim(directory: Path):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ssh").mkdir(exist_ok=True)
    return types.SimpleNamespace(dir=directory, user="spark", hosts=["spark-head", "spark-worker"],
                                 hostvars={"spark-head": {"ansible_host": "10.77.2.11"},
                                           "spark-worker": {"ansible_host": "10.77.2.12"}})


def control_paths(config: str) -> list[str]:
    return [line.split(None, 1)[1] for line in config.splitlines() if line.strip().startswith("ControlPath ")]


def test_a_short_sim_dir_keeps_its_sockets_in_its_own_ssh_directory(cli, tmp_path):
    sim = fake_sim(tmp_path / "s")
    config = cli.write_ssh_config(sim, tmp_path / "known_hosts").read_text()
    assert control_paths(config) == ["%s/%%r@%%h" % (sim.dir / "ssh")] * 2
    for option in ("ControlMaster auto", "ControlPersist 60s", "ServerAliveInterval 5", "BatchMode yes"):
        assert config.count(option) == 2, (option, config)


def test_a_long_sim_dir_moves_its_sockets_to_a_private_directory_that_fits(cli, tmp_path):
    sim = fake_sim(tmp_path / ("d" * 120))
    config = cli.write_ssh_config(sim, tmp_path / "known_hosts").read_text()
    paths = set(control_paths(config))
    assert len(paths) == 1, config
    sockets = Path(paths.pop()).parent
    try:
        assert sockets.parent == Path("/tmp") and sockets.name.startswith("spark-sim-%d-" % os.getuid())
        st = os.lstat(sockets)
        assert st.st_uid == os.getuid() and st.st_mode & 0o777 == 0o700
        longest = str(sockets / "spark@255.255.255.255") + ".XXXXXXXXXXXXXXXX"    # ssh's temporary name
        assert len(longest) < 108
    finally:
        sockets.rmdir()


def test_a_directory_others_can_enter_is_not_used(cli, tmp_path):
    sim = fake_sim(tmp_path / ("e" * 120))
    sockets = cli.mux_dir(sim)
    try:
        os.chmod(sockets, 0o755)
        assert cli.mux_dir(sim) is None
        config = cli.write_ssh_config(sim, tmp_path / "known_hosts").read_text()
        assert "Control" not in config and config.count("BatchMode yes") == 2
    finally:
        sockets.rmdir()


def test_a_user_name_too_long_for_any_socket_path_turns_sharing_off(cli, tmp_path):
    sim = fake_sim(tmp_path / "u")
    sim.user = "u" * 80
    assert cli.mux_dir(sim) is None
    assert "Control" not in cli.write_ssh_config(sim, tmp_path / "known_hosts").read_text()
