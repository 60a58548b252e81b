"""Live state of the checkpoint scenario's sim pair after converge, idempotence
and side_effect (interrupted download, page cache drop, interrupted sync, corrupted blobs,
refs/main newline, daemon transport, lookalikes, pin change, MemAvailable checks).

Molecule's `check` step is not in this scenario's test sequence (it asserts nothing): check mode
is asserted once, site-wide, in the default scenario's verify (test_doctor.py, after doctor ran).
"""

import json
import os
import re

import yaml

SCENARIO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REV = "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
CACHE = "/var/lib/dgxspark/huggingface/hub"
REPO_DIR = CACHE + "/models--deepseek-ai--DeepSeek-V4-Flash-0731"
HOME = "/var/lib/dgxspark/checkpoint"
STATE = "/var/lib/dgxspark/checkpoint-state"   # checkpoint_state_dir: root's, outside the user's home

with open(os.path.join(SCENARIO, "inventory", "hosts.yml"), encoding="utf-8") as _handle:
    _INV = yaml.safe_load(_handle)["all"]["children"]["spark"]["children"]
HEAD_FABRIC = _INV["spark_head"]["hosts"]["spark-head"]["dgxspark_fabric_rails"][0]["ipv4"]
WORKER_FABRIC = _INV["spark_workers"]["hosts"]["spark-worker"]["dgxspark_fabric_rails"][0]["ipv4"]

# What a node's copy looks like, computed on the node (paths, sizes, mtimes, link targets).
LISTING = r"""
import json, os, sys
root = sys.argv[1]
out = {}
for base, dirs, files in os.walk(root):
    dirs[:] = [d for d in dirs if not (base == root and d == "trees")]
    for name in files + [d for d in dirs if os.path.islink(os.path.join(base, d))]:
        path = os.path.join(base, name)
        rel = os.path.relpath(path, root)
        out[rel] = os.readlink(path) if os.path.islink(path) else [os.path.getsize(path), int(os.path.getmtime(path))]
print(json.dumps(out, sort_keys=True))
"""


def listing(host):
    return json.loads(host.check_output("python3 -c %s %s" % (quote(LISTING), REPO_DIR)))


def quote(text):
    return "'" + text.replace("'", "'\\''") + "'"


def test_refs_main_is_exactly_the_sha(host):
    assert host.file(REPO_DIR + "/refs/main").content == REV.encode()


def test_snapshot_links_resolve_into_the_repo_blobs(host):
    out = host.check_output("find %s/snapshots/%s -type l -printf '%%p\\n'" % (REPO_DIR, REV))
    links = out.split()
    assert len(links) == 18  # 12 shards + 6 small files of the stand-in repo
    bad = host.run("find %s/snapshots/%s -xtype l" % (REPO_DIR, REV)).stdout.split()
    assert bad == []


def test_no_unfinished_or_stray_blob(host):
    names = host.check_output("ls -A %s/blobs" % REPO_DIR).split()
    assert names and all(len(n) in (40, 64) for n in names), names


def test_worker_copy_equals_the_head(host):
    if host.backend.get_hostname() != "spark-worker":
        return
    head = host.get_host("ssh://spark-head", ssh_config=host.backend.ssh_config, sudo=True)
    assert listing(host) == listing(head)


def test_blobs_hash_to_their_names(host):
    """Every blob: the 12 shards by sha256, the 6 small files by their git blob id; the counts are asserted."""
    script = r"""
import hashlib, os, sys
base = sys.argv[1]
ok = {"sha256": 0, "git": 0}
bad = []
for name in sorted(os.listdir(base)):
    data = open(os.path.join(base, name), "rb").read()
    if len(name) == 64:
        kind, digest = "sha256", hashlib.sha256(data).hexdigest()
    elif len(name) == 40:
        kind, digest = "git", hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    else:
        bad.append(name)
        continue
    if digest == name:
        ok[kind] += 1
    else:
        bad.append(name)
print(ok["sha256"], ok["git"], len(bad))
"""
    out = host.check_output("python3 -c %s %s/blobs" % (quote(script), REPO_DIR)).split()
    # 12 shards + 6 small files of the pinned revision; after the side effects at most the pin change's extra
    # blobs (kept by default) join them, never an unhashable one.
    assert int(out[0]) >= 12 and int(out[1]) >= 6 and out[2] == "0", out


def test_the_cache_belongs_to_the_checkpoint_user(host):
    assert host.file(REPO_DIR).user == "dgxspark-ckpt"
    assert host.user("dgxspark-ckpt").password in ("!", "!*", "*")


def test_worker_authorizes_the_head_only_from_its_fabric_address(host):
    if host.backend.get_hostname() != "spark-worker":
        return
    keys = host.file(HOME + "/.ssh/authorized_keys")
    assert keys.mode == 0o600 and keys.user == "dgxspark-ckpt"   # written as that user, in its own .ssh
    line = keys.content_string.strip()
    # rrsync -no-del lets --force through: the command refuses a --force word first (issue 24 finding 10).
    assert line.startswith('from="%s",restrict,command="case $SSH_ORIGINAL_COMMAND\' \' in *[[:space:]]--force'
                           % HEAD_FABRIC)
    assert 'exit 1;; esac; exec /usr/bin/rrsync -wo -no-del -no-lock %s" ssh-ed25519 ' % CACHE in line


def test_head_pins_the_worker_host_key_under_its_fabric_address(host):
    if host.backend.get_hostname() != "spark-head":
        return
    known_file = host.file(STATE + "/known_hosts_transfer")
    assert (known_file.user, known_file.mode) == ("root", 0o644)
    known = known_file.content_string.split("\n")
    assert any(line.startswith(WORKER_FABRIC + " ssh-ed25519 ") for line in known)
    assert host.file(HOME + "/.ssh/id_ed25519_transfer").mode == 0o600


def test_no_token_file_no_daemon_left(host):
    """The scenario sets checkpoint_hf_token (the hub stand-in requires it): after every run the file is gone."""
    assert not host.file(STATE + "/token").exists
    assert not host.file("/run/dgxspark-checkpoint").exists
    assert host.run("systemctl is-active dgxspark-checkpoint-rsyncd.service").stdout.strip() != "active"
    # '[f]' keeps the pattern from matching the shell that runs pgrep (its command line holds the pattern)
    left = host.run("pgrep -af 'bin/h[f] download'")
    assert left.rc == 1, "a downloader is still running: %s" % left.stdout
    assert host.run("systemctl is-active dgxspark-checkpoint-download.service").stdout.strip() != "active"


def test_the_hub_stand_in_requires_the_token(host):
    if host.backend.get_hostname() != "spark-head":
        return
    url = "http://127.0.0.1:5564/api/models/deepseek-ai/DeepSeek-V4-Flash-0731/revision/" + REV
    assert host.check_output("curl -s -o /dev/null -w '%%{http_code}' %s" % url) == "401"


def test_the_offline_record_names_the_pin_on_every_node(host):
    record = json.loads(host.file("/var/lib/dgxspark/checkpoint-verified.json").content_string)
    assert record["verified_all"] is True and record["revision"] == REV
    assert record["repo_id"] == "deepseek-ai/DeepSeek-V4-Flash-0731" and len(record["fingerprint"]) == 64
    assert host.file("/var/lib/dgxspark/checkpoint-verified.json").mode == 0o644


def test_an_offline_start_resolves_main_from_the_cache(host):
    if host.backend.get_hostname() != "spark-head":
        return
    cmd = ("HF_HUB_OFFLINE=1 HF_HUB_CACHE=%s /opt/dgxspark/hf-tools/bin/python -c "
           "\"from huggingface_hub import snapshot_download; "
           "print(snapshot_download('deepseek-ai/DeepSeek-V4-Flash-0731', revision='main'))\"" % CACHE)
    assert host.check_output(cmd).strip() == "%s/snapshots/%s" % (REPO_DIR, REV)


def test_the_tools_venv_holds_exactly_the_hash_lock(host):
    """Issue 24, finding 8: the tools venv installed roles/checkpoint/files/hf-tools-requirements.txt (--require-hashes
    --no-deps): every locked package at its locked version, the lock itself in the root-owned state directory."""
    if host.backend.get_hostname() != "spark-head":
        return
    lock_path = os.path.join(SCENARIO, "..", "..", "roles", "checkpoint", "files", "hf-tools-requirements.txt")
    with open(lock_path, encoding="utf-8") as handle:
        text = handle.read()
    pins = {}
    for name, version in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) ", text, re.M):
        pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    assert len(pins) == 15
    freeze = host.check_output("/opt/dgxspark/hf-tools/bin/python -m pip list --format json --disable-pip-version-check")
    held = {re.sub(r"[-_.]+", "-", p["name"]).lower(): p["version"] for p in json.loads(freeze)}
    assert {name: held.get(name) for name in pins} == pins
    assert set(held) - set(pins) <= {"pip", "setuptools", "wheel"}
    locked = host.file(STATE + "/hf-tools-requirements.txt")
    assert locked.user == "root" and locked.mode == 0o644 and locked.content_string == text


def test_the_stored_manifest_lists_the_pinned_revision(host):
    if host.backend.get_hostname() != "spark-head":
        return
    path = "%s/manifests/models--deepseek-ai--DeepSeek-V4-Flash-0731@%s.json" % (STATE, REV)
    manifest = json.loads(host.file(path).content_string)
    assert manifest["revision"] == REV and manifest["last_modified"].startswith("2026-08-01")
    assert len([f for f in manifest["files"] if f.endswith(".safetensors")]) == 12


def test_root_writes_nothing_by_path_in_the_checkpoint_users_home(host):
    """Issue 24, findings 1 and 2: the manifests, the helper, hf's logs and the known hosts live in the root-owned
    state directory (no directory on the way the checkpoint user can write); its home holds only its own files."""
    if host.backend.get_hostname() != "spark-head":
        return
    for path in (STATE, STATE + "/bin", STATE + "/manifests"):
        d = host.file(path)
        assert d.is_directory and d.user == "root" and not d.mode & 0o022, path
    for name in ("download.log", "download-progress.log"):
        assert host.file(STATE + "/" + name).exists, name
    home = host.run("find %s -xdev ! -user dgxspark-ckpt -printf '%%P %%u\\n'" % HOME).stdout.split("\n")
    assert [line for line in home if line.strip()] == [], home
