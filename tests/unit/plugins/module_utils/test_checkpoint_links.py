# -*- coding: utf-8 -*-
"""No root step follows a link in the tree the checkpoint user owns (issue 13).

Each test builds a synthetic hub cache, gives it to an unprivileged user (as the role gives the cache to
dgxspark-ckpt), plants a real symlink *as that user* (a forked child that dropped to its uid), and shows the
root step refusing it, naming the path, with the link's target untouched. Run as a non-root user the links
are planted by the test's own user, and the chown checks are skipped.
"""

from __future__ import annotations

import os
import pathlib
import pwd
import shutil
import tempfile
from unittest import mock

import pytest
import yaml

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.dgxspark.cluster.plugins.module_utils import hf_cache as hc
from ansible_collections.dgxspark.cluster.plugins.modules import checkpoint_verify
from modtest import ExitJson, FailJson, exit_json as _exit_json, fail_json as _fail_json
from test_hf_cache import REPO, REV, make_cache

ROOT = os.geteuid() == 0
ROLE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "checkpoint")


def _less_trusted_uid():
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:  # pragma: no cover - every Debian/Ubuntu has nobody
        return 65534


def give_tree(path, uid):
    for base, dirs, files in os.walk(path):
        os.lchown(base, uid, uid)
        for name in dirs + files:
            os.lchown(os.path.join(base, name), uid, uid)


def as_user(uid, func):
    """Run ``func`` in a child that dropped to ``uid`` (when the test runs as root); its exit status must be 0."""
    if not ROOT:
        func()
        return
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            func()
            os._exit(0)
        except BaseException:  # noqa: B902 - report any failure through the exit status
            os._exit(1)
    status = os.waitpid(pid, 0)[1]
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "planting the link as uid %d failed" % uid


@pytest.fixture
def owned_cache():
    """A complete cache owned by a less trusted user, and a root-owned victim directory beside it
    (in a directory of its own that user can reach: pytest's tmp_path is 0700 root)."""
    uid = _less_trusted_uid()
    tmp_path = pathlib.Path(tempfile.mkdtemp(prefix="dgxspark-links-"))
    os.chmod(tmp_path, 0o755)
    cache, repo, manifest = make_cache(tmp_path)
    if ROOT:
        give_tree(str(tmp_path / "hub"), uid)
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    (victim / "precious").write_bytes(b"root's\n")
    os.chmod(victim / "precious", 0o600)
    yield {"uid": uid, "cache": cache, "repo": repo, "manifest": manifest, "victim": victim}
    shutil.rmtree(tmp_path)


def _untouched(victim):
    st = os.lstat(victim)
    assert (victim / "precious").read_bytes() == b"root's\n"
    assert sorted(os.listdir(victim)) == ["precious"]
    if ROOT:
        assert (st.st_uid, st.st_mode & 0o7777) == (0, 0o700)
        assert os.lstat(victim / "precious").st_uid == 0


def test_write_ref_refuses_refs_turned_into_a_link(owned_cache):
    repo, victim = owned_cache["repo"], owned_cache["victim"]

    def plant():
        for name in os.listdir(repo / "refs"):
            os.unlink(repo / "refs" / name)
        os.rmdir(repo / "refs")
        os.symlink(str(victim), str(repo / "refs"))

    as_user(owned_cache["uid"], plant)
    with pytest.raises(hc.LinkRefused) as err:
        hc.write_ref(str(repo), REV, uid=0, gid=0)
    assert str(repo / "refs") in str(err.value) and "refused" in str(err.value)
    _untouched(victim)
    assert [rel for rel, _why in hc.link_problems(str(repo))] == ["refs"]


def test_write_ref_refuses_a_ref_that_is_a_link(owned_cache):
    repo, victim = owned_cache["repo"], owned_cache["victim"]

    def plant():
        os.unlink(repo / "refs" / "main")
        os.symlink(str(victim / "precious"), str(repo / "refs" / "main"))

    as_user(owned_cache["uid"], plant)
    assert hc.read_ref(str(repo)) is None  # not followed
    with pytest.raises(hc.LinkRefused) as err:
        hc.write_ref(str(repo), REV, uid=0, gid=0)
    assert str(repo / "refs" / "main") in str(err.value)
    _untouched(victim)


def test_write_ref_as_root_in_a_clean_tree_still_works(owned_cache):
    repo = owned_cache["repo"]
    (repo / "refs" / "main").write_bytes(REV.encode() + b"\n")
    uid = owned_cache["uid"] if ROOT else -1
    assert hc.write_ref(str(repo), REV, uid=uid, gid=uid) is True
    assert (repo / "refs" / "main").read_bytes() == REV.encode()
    if ROOT:
        assert os.lstat(repo / "refs" / "main").st_uid == uid
    assert not [n for n in os.listdir(repo / "refs") if n.endswith(".tmp")]


@pytest.mark.parametrize("where", ["blobs", "snapshots/%s/encoding" % REV, "blobs/extra-dir", "refs/main", "blobs/loose"])
def test_link_problems_name_every_link_a_root_step_could_follow(owned_cache, where):
    repo, victim = owned_cache["repo"], owned_cache["victim"]

    def plant():
        path = repo / where
        if os.path.isdir(path) and not os.path.islink(path):
            for base, dirs, files in os.walk(path, topdown=False):
                for name in files + [d for d in dirs if os.path.islink(os.path.join(base, d))]:
                    os.unlink(os.path.join(base, name))
                for name in dirs:
                    if os.path.isdir(os.path.join(base, name)):
                        os.rmdir(os.path.join(base, name))
            os.rmdir(path)
        elif os.path.lexists(path):
            os.unlink(path)
        os.symlink(str(victim), str(path))

    as_user(owned_cache["uid"], plant)
    assert where in [rel for rel, _why in hc.link_problems(str(repo))]
    _untouched(victim)


def test_the_snapshot_links_are_fine(owned_cache):
    assert hc.link_problems(str(owned_cache["repo"])) == []


def _verify_module(args):
    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, "exit_json", _exit_json), \
            mock.patch.object(basic.AnsibleModule, "fail_json", _fail_json):
        with pytest.raises((ExitJson, FailJson)) as excinfo:
            checkpoint_verify.main()
    return excinfo.value.args[0]


def test_the_verify_module_refuses_blobs_turned_into_a_link_before_any_root_step(owned_cache):
    """What the head's transfer key could do with rsync --force: blobs/ replaced by a link on the worker."""
    repo, victim = owned_cache["repo"], owned_cache["victim"]

    def plant():
        os.rename(repo / "blobs", repo / "blobs.old")
        os.symlink(str(victim), str(repo / "blobs"))
        os.unlink(repo / "refs" / "main")  # so that write_ref would have something to do

    as_user(owned_cache["uid"], plant)
    owner = pwd.getpwuid(owned_cache["uid"]).pw_name
    result = _verify_module({"cache_dir": owned_cache["cache"], "repo_id": REPO, "revision": REV,
                             "manifest": owned_cache["manifest"], "write_ref": True, "owner": owner})
    assert result["failed"] and str(repo / "blobs") in result["msg"] and "refused" in result["msg"]
    assert result["links"] == [str(repo / "blobs")]
    assert not os.path.lexists(repo / "refs" / "main")
    _untouched(victim)


def _tasks(name):
    with open(os.path.join(ROLE, "tasks", name), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def test_the_directory_tasks_never_follow_a_link():
    """Both go through safe_directories (fd-based, no check-then-act: tests/unit/plugins/module_utils/test_safe_dirs.py)."""
    for name, task, dirs in (("setup.yml", "Create the directories", "__checkpoint_dirs"),
                             ("head.yml", "Create the state directory", "__checkpoint_head_dirs")):
        found = [t for t in _tasks(name) if t.get("name", "").startswith(task)]
        assert found and dirs in found[0]["dgxspark.cluster.safe_directories"]["directories"], (name, task)
        assert not [t for t in _tasks(name) if "ansible.builtin.file" in t
                    and t["ansible.builtin.file"].get("state") == "directory"], name


USER_TREES = ("checkpoint_home", "checkpoint_cache_dir", "__checkpoint_repo_dir", "__checkpoint_ssh_dir",
              "__checkpoint_hf_home")


def _all_tasks(tasks):
    for task in tasks or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _all_tasks(task.get(key))


def test_no_checkpoint_task_makes_a_directory_by_path_under_the_users_tree():
    """Issue 24, finding 3: sync_daemon.yml made the repo folder with ``file state=directory owner=<user>``, which
    follows a link the user swapped in after the verify and hands its target to the user. Every task file of the
    role: a directory is made only through safe_directories."""
    for name in sorted(os.listdir(os.path.join(ROLE, "tasks"))):
        by_path = [t.get("name") for t in _all_tasks(_tasks(name)) if "ansible.builtin.file" in t
                   and t["ansible.builtin.file"].get("state") == "directory"
                   and ("checkpoint_user" in str(t["ansible.builtin.file"].get("owner"))
                        or any(v in t["ansible.builtin.file"]["path"] for v in USER_TREES))]
        assert by_path == [], "%s: %s" % (name, by_path)
    found = [t for t in _all_tasks(_tasks("sync_daemon.yml")) if "dgxspark.cluster.safe_directories" in t]
    paths = [d["path"] for t in found for d in t["dgxspark.cluster.safe_directories"]["directories"]]
    assert "{{ __checkpoint_repo_dir }}" in paths


ROOT_PATH_MODULES = ("ansible.builtin.copy", "ansible.builtin.template", "ansible.builtin.slurp", "ansible.builtin.file",
                     "ansible.builtin.lineinfile", "ansible.builtin.fetch")


def _resolve(text, variables, depth=0):
    """Expand the role's own ``{{ __checkpoint_* }}`` path variables (one level of Jinja, enough for vars/main.yml)."""
    for name, value in variables.items():
        if isinstance(value, str) and "{{ %s }}" % name in text and depth < 5:
            text = _resolve(text.replace("{{ %s }}" % name, value), variables, depth + 1)
    return text


def test_root_opens_no_path_below_the_checkpoint_users_home_or_cache():
    """Issue 24, findings 1 and 2: root copied authorized_keys, known_hosts, the token, the manifest, the helper and
    the CA bundle into checkpoint_home, slurped the .pub key from its .ssh, and had systemd and the download module
    open hf's logs there, all by path. Now every file root writes by path lives in checkpoint_state_dir (root's),
    and what only the user relies on (its .ssh) is read and written as that user."""
    with open(os.path.join(ROLE, "vars", "main.yml"), encoding="utf-8") as handle:
        variables = yaml.safe_load(handle)
    for name in ("__checkpoint_manifest_path", "__checkpoint_helper", "__checkpoint_known_hosts", "__checkpoint_token_file",
                 "__checkpoint_ca_file", "__checkpoint_download_log", "__checkpoint_progress_log"):
        assert variables[name].startswith("{{ checkpoint_state_dir }}/"), (name, variables[name])
    found = []
    for name in sorted(os.listdir(os.path.join(ROLE, "tasks"))):
        for task in _all_tasks(_tasks(name)):
            for module in ROOT_PATH_MODULES:
                args = task.get(module)
                if not isinstance(args, dict) or task.get("become_user"):
                    continue
                if module == "ansible.builtin.file" and args.get("state") == "directory":
                    continue  # directories: the test above (safe_directories only, in the user's tree)
                path = _resolve(str(args.get("dest") or args.get("path") or args.get("src") or ""), variables)
                if any(v in path for v in ("checkpoint_home", "checkpoint_cache_dir")):
                    found.append("%s: %s -> %s" % (name, task.get("name"), path))
    assert found == []


def test_the_stray_blob_removal_runs_as_the_checkpoint_user():
    found = [t for t in _tasks("sync_round.yml") if "stray" in t.get("name", "")]
    argv = found[0]["ansible.builtin.command"]["argv"]
    assert argv[:4] == ["runuser", "-u", "{{ checkpoint_user }}", "--"] and argv[4] == "rm"


def test_existing_parents_are_never_chowned():
    with open(os.path.join(ROLE, "vars", "main.yml"), encoding="utf-8") as handle:
        dirs = yaml.safe_load(handle)["__checkpoint_dirs"]
    parents = [d["path"] for d in dirs if d.get("parent")]
    assert parents == ["{{ checkpoint_home | dirname }}", "{{ checkpoint_cache_dir | dirname }}"]
    task = [t for t in _tasks("setup.yml") if t.get("name", "").startswith("Create the directories")][0]
    assert task["dgxspark.cluster.safe_directories"]["directories"] == "{{ __checkpoint_dirs }}"  # parent: honoured there


def test_the_runtime_leaves_existing_parents_alone_too():
    runtime = os.path.join(ROLE, "..", "runtime")
    with open(os.path.join(runtime, "vars", "main.yml"), encoding="utf-8") as handle:
        dirs = yaml.safe_load(handle)["__runtime_dirs"]
    assert all(d.get("parent") for d in dirs if "dirname" in d["path"])
    assert not any(d.get("parent") for d in dirs if "dirname" not in d["path"])
    with open(os.path.join(runtime, "tasks", "user.yml"), encoding="utf-8") as handle:
        task = [t for t in yaml.safe_load(handle) if t.get("name") == "Create the directories"][0]
    assert "item.parent" in task["when"] and task["ansible.builtin.file"]["follow"] is False


# --------------------------------------------------------------------------- issue 24, finding 4: races and FIFOs
# The checks above are over by the time root acts; these plant the link *between* the check and the act (at the
# moment root opens its temporary file or starts removing), or plant what a by-path open would hang on.

def _swap_at_first_open(suffix, swap):
    """Patch os.open so that ``swap`` runs (as the less trusted user) just before root's first open of a name
    ending with ``suffix``: the window a by-path check-then-act leaves."""
    real_open = os.open
    state = {"done": False}

    def hooked(path, *args, **kwargs):
        if not state["done"] and isinstance(path, str) and path.endswith(suffix):
            state["done"] = True
            swap()
        return real_open(path, *args, **kwargs)
    return mock.patch("os.open", hooked), state


def test_write_ref_lands_in_the_refs_it_opened_when_refs_is_swapped_for_a_link_mid_write(owned_cache):
    repo, victim, uid = owned_cache["repo"], owned_cache["victim"], owned_cache["uid"]
    os.unlink(repo / "refs" / "main")

    def swap():
        def plant():
            os.rename(repo / "refs", repo / "refs.real")
            os.symlink(str(victim), str(repo / "refs"))
        as_user(uid, plant)

    patch, state = _swap_at_first_open(".tmp", swap)
    with patch:
        try:
            hc.write_ref(str(repo), REV, uid=0, gid=0)
        except hc.LinkRefused:
            pass  # refusing is as good as writing where it opened
    assert state["done"], "the swap never ran: the test did not reach root's write"
    _untouched(victim)
    assert (repo / "refs.real" / "main").read_bytes() == REV.encode()


def test_read_ref_and_write_ref_do_not_hang_on_a_fifo(owned_cache):
    import signal
    repo, uid = owned_cache["repo"], owned_cache["uid"]

    def plant():
        os.unlink(repo / "refs" / "main")
        os.mkfifo(str(repo / "refs" / "main"))

    as_user(uid, plant)

    def timeout(_signum, _frame):
        raise AssertionError("blocked on the FIFO at refs/main")

    old = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(10)
    try:
        assert hc.read_ref(str(repo)) is None
        report = hc.verify_cache(owned_cache["cache"], REPO, REV, manifest=owned_cache["manifest"])
        assert "ref_missing" in [p["kind"] for p in report["problems"]]
        assert hc.write_ref(str(repo), REV, uid=uid, gid=uid) is True
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert (repo / "refs" / "main").read_bytes() == REV.encode()


@pytest.mark.parametrize("top", ["snapshots", "blobs"])
def test_prune_never_removes_through_a_directory_swapped_for_a_link(owned_cache, top):
    """checkpoint_old_revisions: remove; the user swaps snapshots/ (or blobs/) for a link to a root directory that
    holds entries of the planned names, after the plan was made."""
    repo, victim, uid = owned_cache["repo"], owned_cache["victim"], owned_cache["uid"]
    other = "a" * 40
    old_blob = "b" * 64
    (repo / "snapshots" / other).mkdir()
    (repo / "blobs" / old_blob).write_bytes(b"o" * 300)
    if ROOT:
        give_tree(str(repo), uid)
    plan = hc.prune_plan(str(repo), REV)
    assert plan["snapshots"] == ["snapshots/" + other] and plan["blobs"] == ["blobs/" + old_blob]
    (victim / other).mkdir()                          # root's directories of the planned names
    (victim / other / "keep").write_bytes(b"root's\n")
    (victim / old_blob).write_bytes(b"root's\n")

    def plant():
        os.rename(repo / top, repo / (top + ".real"))
        os.symlink(str(victim), str(repo / top))

    as_user(uid, plant)
    with pytest.raises(hc.LinkRefused) as err:
        hc.prune(str(repo), plan)
    assert str(repo / top) in str(err.value) and "refused" in str(err.value)
    assert (victim / other / "keep").read_bytes() == b"root's\n"
    assert (victim / old_blob).read_bytes() == b"root's\n"


def test_prune_removes_a_planned_name_turned_link_as_the_link(owned_cache):
    repo, victim, uid = owned_cache["repo"], owned_cache["victim"], owned_cache["uid"]
    other = "a" * 40
    (repo / "snapshots" / other).mkdir()
    (victim / "keep").mkdir()
    (victim / "keep" / "file").write_bytes(b"root's\n")
    if ROOT:
        give_tree(str(repo), uid)
    plan = hc.prune_plan(str(repo), REV)

    def plant():
        os.rmdir(repo / "snapshots" / other)
        os.symlink(str(victim / "keep"), str(repo / "snapshots" / other))

    as_user(uid, plant)
    hc.prune(str(repo), plan)
    assert not os.path.lexists(repo / "snapshots" / other)
    assert (victim / "keep" / "file").read_bytes() == b"root's\n"


def test_stale_partials_are_removed_only_inside_the_blobs_directory_opened(owned_cache):
    """checkpoint_download removes the unfinished files of finished blobs as root: through a descriptor of blobs/,
    never through a blobs/ the user swapped for a link to a root directory holding files of the same names."""
    from ansible_collections.dgxspark.cluster.plugins.module_utils import hf_download as hd
    repo, victim, uid = owned_cache["repo"], owned_cache["victim"], owned_cache["uid"]
    blob = sorted(os.listdir(repo / "blobs"))[0]
    (repo / "blobs" / (blob + ".1b8b7324.incomplete")).write_bytes(b"partial")
    if ROOT:
        give_tree(str(repo), uid)
    (victim / blob).write_bytes(b"root's\n")
    (victim / (blob + ".1b8b7324.incomplete")).write_bytes(b"root's\n")
    state = {"done": False}

    real_open_directory = hd.safe_dirs.open_directory

    def swap_then_open(path):   # the swap lands between the listing and the removal
        if not state["done"]:
            state["done"] = True
            as_user(uid, lambda: (os.rename(repo / "blobs", repo / "blobs.real"),
                                  os.symlink(str(victim), str(repo / "blobs"))))
        return real_open_directory(path)

    with mock.patch.object(hd.safe_dirs, "open_directory", swap_then_open):
        with pytest.raises(hd.safe_dirs.UnsafePath):
            hd.remove_stale_partials(str(repo))
    assert state["done"]
    assert sorted(os.listdir(victim)) == sorted(["precious", blob, blob + ".1b8b7324.incomplete"])
    assert (victim / (blob + ".1b8b7324.incomplete")).read_bytes() == b"root's\n"


def test_stale_partials_removed_in_a_clean_tree(owned_cache):
    from ansible_collections.dgxspark.cluster.plugins.module_utils import hf_download as hd
    repo = owned_cache["repo"]
    blob = sorted(os.listdir(repo / "blobs"))[0]
    (repo / "blobs" / (blob + ".1b8b7324.incomplete")).write_bytes(b"partial")
    assert hd.remove_stale_partials(str(repo)) == [blob + ".1b8b7324.incomplete"]
    assert (repo / "blobs" / blob).exists() and not (repo / "blobs" / (blob + ".1b8b7324.incomplete")).exists()
