# -*- coding: utf-8 -*-
"""plugins/module_utils/safe_dirs.py: root creates and fixes directories in a tree a less trusted user owns
without ever acting on a link's target.

The links are planted *as that user* (a child that dropped to nobody's uid) when the tests run as root; the
races (a link swapped in between the check and the act) are made deterministic by planting the link from a
wrapper around the check itself.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import stat
import tempfile

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import safe_dirs as sd
from test_checkpoint_links import ROOT, _less_trusted_uid, as_user


@pytest.fixture
def tree():
    """base (root 0755) / home (the less trusted user's, 0750) and a root-owned victim directory beside it."""
    uid = _less_trusted_uid() if ROOT else os.getuid()
    base = pathlib.Path(tempfile.mkdtemp(prefix="dgxspark-safedirs-"))
    os.chmod(base, 0o755)
    home = base / "home"
    home.mkdir()
    os.chmod(home, 0o750)
    os.chown(home, uid, uid)
    victim = base / "victim"
    victim.mkdir()
    os.chmod(victim, 0o700)
    yield {"uid": uid, "base": base, "home": home, "victim": victim}
    shutil.rmtree(base)


def _state(path):
    info = os.lstat(path)
    return info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)


def test_creates_then_fixes_then_leaves_alone(tree):
    uid, home = tree["uid"], tree["home"]
    ssh = str(home / ".ssh")
    assert sd.ensure(ssh, uid, uid, 0o700) == "created"
    assert _state(ssh) == (uid, uid, 0o700) and os.path.isdir(ssh)
    assert sd.ensure(ssh, uid, uid, 0o700) is None
    os.chmod(ssh, 0o755)
    assert sd.ensure(ssh, uid, uid, 0o700, check=True) == "fixed"
    assert _state(ssh)[2] == 0o755  # check mode changed nothing
    assert sd.ensure(ssh, uid, uid, 0o700) == "fixed"
    assert _state(ssh) == (uid, uid, 0o700)


def test_an_existing_parent_keeps_its_owner_and_mode(tree):
    uid, home = tree["uid"], tree["home"]
    assert sd.ensure(str(home), 0, 0, 0o755, parent=True) is None
    assert _state(home) == (uid, uid, 0o750)
    made = tree["base"] / "new" / "deeper"
    assert sd.ensure(str(made), 0, 0, 0o755, parent=True) == "created"
    assert _state(made) == (0, 0, 0o755) and _state(made.parent) == (0, 0, 0o755)


def test_check_mode_with_a_missing_ancestor_creates_nothing(tree):
    target = tree["base"] / "a" / "b"
    assert sd.ensure(str(target), 0, 0, 0o755, check=True) == "created"
    assert not (tree["base"] / "a").exists()


def test_a_link_planted_in_place_of_the_directory_is_refused(tree):
    uid, home, victim = tree["uid"], tree["home"], tree["victim"]
    link = home / ".ssh"
    as_user(uid, lambda: os.symlink(str(victim), str(link)))
    with pytest.raises(sd.UnsafePath, match=r"%s is a symbolic link" % link):
        sd.ensure(str(link), uid, uid, 0o755)
    assert _state(victim) == (0, 0, 0o700)
    assert os.path.islink(link)


def test_a_link_on_the_way_in_the_users_tree_is_refused(tree):
    uid, home, victim = tree["uid"], tree["home"], tree["victim"]
    as_user(uid, lambda: os.symlink(str(victim), str(home / "hf")))
    with pytest.raises(sd.UnsafePath, match=r"%s is a symbolic link in a directory another user controls" % (home / "hf")):
        sd.ensure(str(home / "hf" / "hub"), uid, uid, 0o755)
    assert os.listdir(victim) == [] and _state(victim) == (0, 0, 0o700)


def test_a_roots_link_in_a_roots_directory_is_followed(tree):
    real = tree["base"] / "real"
    real.mkdir()
    os.chmod(real, 0o755)
    os.symlink("real", str(tree["base"] / "alias"))  # relative, root's, in root's 0755 base
    target = tree["base"] / "alias" / "cache"
    if not ROOT:  # the base is then the test user's: its link is not root's to trust
        with pytest.raises(sd.UnsafePath):
            sd.ensure(str(target), os.getuid(), os.getgid(), 0o750)
        return
    assert sd.ensure(str(target), 0, 0, 0o750) == "created"
    assert _state(real / "cache") == (0, 0, 0o750)


def test_a_link_swapped_in_between_the_check_and_the_create_is_refused(tree, monkeypatch):
    uid, home, victim = tree["uid"], tree["home"], tree["victim"]
    real_stat = os.stat

    def stat_then_plant(name, *args, **kwargs):
        try:
            return real_stat(name, *args, **kwargs)
        except FileNotFoundError:
            if name == ".ssh":  # ... and the user plants a link right after root looked
                as_user(uid, lambda: os.symlink(str(victim), str(home / ".ssh")))
            raise

    monkeypatch.setattr(sd.os, "stat", stat_then_plant)
    with pytest.raises(sd.UnsafePath, match="appeared while this step ran"):
        sd.ensure(str(home / ".ssh"), uid, uid, 0o755)
    assert _state(victim) == (0, 0, 0o700)


def test_a_link_swapped_in_between_the_check_and_the_fix_is_refused(tree, monkeypatch):
    uid, home, victim = tree["uid"], tree["home"], tree["victim"]
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o755)
    os.chown(ssh, uid, uid)
    real_stat = os.stat

    def stat_then_swap(name, *args, **kwargs):
        result = real_stat(name, *args, **kwargs)
        if name == ".ssh" and not os.path.islink(ssh):  # root saw a directory; the user swaps it for a link
            def swap():
                os.rename(str(ssh), str(home / "old"))
                os.symlink(str(victim), str(ssh))
            as_user(uid, swap)
        return result

    monkeypatch.setattr(sd.os, "stat", stat_then_swap)
    with pytest.raises(sd.UnsafePath, match="appeared while this step ran"):
        sd.ensure(str(ssh), uid, uid, 0o700)
    assert _state(victim) == (0, 0, 0o700)


@pytest.mark.parametrize("path", ["relative/dir", "/a/../b", "/a//b", "/a/b/", "/"])
def test_a_path_that_is_not_absolute_and_normalised_is_refused(path):
    with pytest.raises(sd.UnsafePath, match="not an absolute, normalised path"):
        sd.ensure(path, 0, 0, 0o755)


def _module(args, check=False):
    from unittest import mock  # pylint: disable=import-outside-toplevel

    from ansible.module_utils import basic  # pylint: disable=import-outside-toplevel
    from ansible.module_utils.testing import patch_module_args  # pylint: disable=import-outside-toplevel
    from ansible_collections.dgxspark.cluster.plugins.modules import safe_directories  # pylint: disable=import-outside-toplevel
    from modtest import ExitJson, FailJson, exit_json, fail_json  # pylint: disable=import-outside-toplevel

    if check:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args), mock.patch.object(basic.AnsibleModule, "exit_json", exit_json), \
            mock.patch.object(basic.AnsibleModule, "fail_json", fail_json):
        with pytest.raises((ExitJson, FailJson)) as excinfo:
            safe_directories.main()
    return excinfo.value.args[0]


def test_the_module_reports_what_it_made_and_stops_at_the_first_link(tree):
    uid, home, victim = tree["uid"], tree["home"], tree["victim"]
    owner = "nobody" if ROOT else None
    if owner is None:
        import pwd  # pylint: disable=import-outside-toplevel
        owner = pwd.getpwuid(os.getuid()).pw_name
    group = __import__("grp").getgrgid(uid).gr_name if ROOT else None
    dirs = [{"path": str(tree["base"]), "owner": "root", "mode": "0755", "parent": True},
            {"path": str(home / ".ssh"), "owner": owner, "group": group, "mode": "0700"}]
    assert _module({"directories": dirs}, check=True) == {"changed": True, "created": [str(home / ".ssh")], "fixed": []}
    assert not (home / ".ssh").exists()
    assert _module({"directories": dirs}) == {"changed": True, "created": [str(home / ".ssh")], "fixed": []}
    assert _module({"directories": dirs}) == {"changed": False, "created": [], "fixed": []}
    as_user(uid, lambda: os.symlink(str(victim), str(home / "hf-home")))
    result = _module({"directories": dirs + [{"path": str(home / "hf-home"), "owner": "root", "mode": "0755"}]})
    assert result["failed"] and str(home / "hf-home") in result["msg"] and "symbolic link" in result["msg"]
    assert _state(victim) == (0, 0, 0o700)
    missing_user = {"directories": [{"path": str(home / ".ssh"), "owner": "no-such-user-here", "mode": "0700"}]}
    result = _module(missing_user)
    assert result["failed"] and "no user no-such-user-here" in result["msg"]
    # check mode before the user exists (a fresh node): to be fixed, not a failure
    assert _module(missing_user, check=True) == {"changed": True, "created": [], "fixed": [str(home / ".ssh")]}


# --------------------------------------------------------------------------- remove (uninstall.yml)

def test_remove_takes_a_tree_the_user_owns_without_reaching_a_planted_links_target(tree):
    uid, home, victim = tree["uid"], tree["home"], tree["victim"]
    (victim / "keep").write_text("root's\n")
    as_user(uid, lambda: (os.makedirs(str(home / "bin" / "deep")), os.symlink(str(victim), str(home / "bin" / "deep" / "v")),
                          os.symlink(str(victim / "keep"), str(home / "bin" / "k")),
                          pathlib.Path(home / "bin" / "f").write_text("x")))
    assert sd.remove(str(home / "bin"), check=True) == "removed"
    assert (home / "bin" / "f").exists()                      # check mode removed nothing
    assert sd.remove(str(home / "bin")) == "removed"
    assert not os.path.lexists(str(home / "bin"))
    assert (victim / "keep").read_text() == "root's\n" and _state(victim) == (0, 0, 0o700)
    assert sd.remove(str(home / "bin")) is None                # nothing there: nothing to do


def test_remove_refuses_a_link_on_the_way_in_a_directory_the_user_writes(tree):
    uid, home, victim = tree["uid"], tree["home"], tree["victim"]
    (victim / "authorized_keys").write_text("root's\n")
    as_user(uid, lambda: os.symlink(str(victim), str(home / ".ssh")))
    with pytest.raises(sd.UnsafePath, match=r"%s is a symbolic link in a directory another user controls" % (home / ".ssh")):
        sd.remove(str(home / ".ssh" / "authorized_keys"))
    assert (victim / "authorized_keys").read_text() == "root's\n"


def test_remove_a_link_in_place_of_a_file_removes_the_link_only(tree):
    uid, home, victim = tree["uid"], tree["home"], tree["victim"]
    (victim / "f").write_text("root's\n")
    as_user(uid, lambda: os.symlink(str(victim / "f"), str(home / "known_hosts")))
    assert sd.remove(str(home / "known_hosts")) == "removed"
    assert not os.path.lexists(str(home / "known_hosts")) and (victim / "f").read_text() == "root's\n"


def test_remove_only_empty_leaves_a_directory_with_content(tree):
    base = tree["base"]
    (base / "state" / "kept").mkdir(parents=True)
    assert sd.remove(str(base / "state"), only_empty=True) == "not empty"
    assert (base / "state" / "kept").is_dir()
    (base / "state" / "kept").rmdir()
    assert sd.remove(str(base / "state"), only_empty=True) == "removed"
