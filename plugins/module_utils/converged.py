# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Converged stamps: what a complete run of a role left on a node, and whether it still holds.

A no-op re-run of site.yml should cost about what reading the node costs, not
what converging it costs. At the end of a complete run (no tag filter, not
check mode) each role records a stamp on every node:

``/var/lib/dgxspark/converged/<role>.json``::

    {"role": "nic", "inputs": "<sha256 of the run's inputs>",
     "resources": {"paths": [...], "trees": [...], "packages": [...], "units": [...],
                   "users": [...], "groups": [...], "commands": [...]},
     "snapshot": {"path:/etc/dgxspark/nccl-static.env": "file 0644 0:0 sha256:...", ...}}

The next run computes the same inputs digest on the controller (every role
variable, the topology, the collection's own files) and asks each node, in one
call, whether every stamp still matches: same inputs, and every recorded
resource reads back the same. Any difference is drift, named, and the run
converges as usual. Nothing here changes a node but ``write_stamp``.

The resources, and how each reads back (one line of text per key):

- ``paths``: type, mode, owner and, for a regular file, the sha256 of its content
  (size and mtime above ``HASH_LIMIT``); a symlink's target; ``absent``.
- ``trees``: the same for every entry below a directory (symlinks not followed).
- ``packages``: ``dpkg-query`` version and status (a hold shows as ``hold ok installed``).
- ``units``: ``systemctl show`` UnitFileState and ActiveState.
- ``users`` / ``groups``: the passwd entry (uid, gid, home, shell) / the group's gid and members.
- ``commands``: an argv and what to compare: ``stdout`` (its sha256 and the exit code) or ``rc``.
"""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import stat

STAMP_VERSION = 1
HASH_LIMIT = 64 * 1024 * 1024
RESOURCE_KINDS = ("paths", "trees", "packages", "units", "users", "groups", "commands")


class ConvergedError(Exception):
    """A resource list that cannot be read back (wrong shape)."""


def digest(value):
    """sha256 of a JSON-able value, canonical (sorted keys, no whitespace); non-JSON values as str()."""
    blob = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def normalize_resources(resources):
    """Check the shape of a resource spec and return it with every kind present, lists sorted and unique."""
    if resources is None:
        resources = {}
    if not isinstance(resources, dict):
        raise ConvergedError("resources must be a mapping of %s, got %s" % (", ".join(RESOURCE_KINDS), type(resources).__name__))
    unknown = sorted(set(resources) - set(RESOURCE_KINDS))
    if unknown:
        raise ConvergedError("unknown resource kind(s) %s; expected %s" % (", ".join(unknown), ", ".join(RESOURCE_KINDS)))
    out = {}
    for kind in RESOURCE_KINDS:
        items = resources.get(kind) or []
        if not isinstance(items, list):
            raise ConvergedError("resources.%s must be a list, got %s" % (kind, type(items).__name__))
        if kind == "commands":
            cmds = []
            for item in items:
                if not isinstance(item, dict) or not isinstance(item.get("argv"), list) or not item["argv"]:
                    raise ConvergedError("resources.commands entries are {argv: [...], compare: stdout|rc}, got %r" % (item,))
                compare = item.get("compare", "stdout")
                if compare not in ("stdout", "rc"):
                    raise ConvergedError("resources.commands compare must be stdout or rc, got %r" % (compare,))
                cmds.append({"argv": [str(a) for a in item["argv"]], "compare": compare})
            out[kind] = sorted(cmds, key=digest)
        else:
            for item in items:
                if not isinstance(item, str) or not item:
                    raise ConvergedError("resources.%s entries must be non-empty strings, got %r" % (kind, item))
                if kind in ("paths", "trees") and not item.startswith("/"):
                    raise ConvergedError("resources.%s entries must be absolute paths, got %r" % (kind, item))
            out[kind] = sorted(set(items))
    return out


def read_path(path):
    """One line describing what is at path, without following a final symlink."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "absent"
    except OSError as exc:
        return "unreadable %s" % exc.strerror
    head = "%04o %d:%d" % (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
    if stat.S_ISLNK(st.st_mode):
        return "link %s -> %s" % (head, os.readlink(path))
    if stat.S_ISDIR(st.st_mode):
        return "dir %s" % head
    if stat.S_ISREG(st.st_mode):
        if st.st_size > HASH_LIMIT:
            return "file %s size:%d mtime:%d" % (head, st.st_size, st.st_mtime_ns)
        sha = hashlib.sha256()
        try:
            with open(path, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    sha.update(chunk)
        except OSError as exc:
            return "file %s unreadable %s" % (head, exc.strerror)
        return "file %s sha256:%s" % (head, sha.hexdigest())
    return "other %s" % head


def read_tree(root):
    """{relative path: read_path} for root and everything below it (symlinks listed, not followed)."""
    out = {".": read_path(root)}
    if not os.path.isdir(root) or os.path.islink(root):
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            full = os.path.join(dirpath, name)
            out[os.path.relpath(full, root)] = read_path(full)
    return out


def parse_dpkg_query(text):
    """{package: 'version status'} from dpkg-query -W -f '${binary:Package}\\t${Version}\\t${Status}\\n'."""
    out = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 3:
            continue
        name = parts[0].split(":", 1)[0]
        out[name] = "%s %s" % (parts[1], parts[2])
    return out


def parse_systemctl_show(text):
    """{unit: 'UnitFileState ActiveState'} from systemctl show -p Id,UnitFileState,ActiveState (blank-line separated)."""
    out = {}
    for block in text.strip().split("\n\n"):
        props = {}
        for line in block.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                props[key] = value
        if props.get("Id"):
            out[props["Id"]] = "%s %s" % (props.get("UnitFileState") or "-", props.get("ActiveState") or "-")
    return out


def read_user(name):
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return "absent"
    return "uid:%d gid:%d home:%s shell:%s" % (entry.pw_uid, entry.pw_gid, entry.pw_dir, entry.pw_shell)


def read_group(name):
    try:
        entry = grp.getgrnam(name)
    except KeyError:
        return "absent"
    return "gid:%d members:%s" % (entry.gr_gid, ",".join(sorted(entry.gr_mem)))


def snapshot(resources, run_command):
    """Read every resource back; returns {key: line}.

    run_command(argv) -> (rc, stdout, stderr), as AnsibleModule.run_command.
    """
    res = normalize_resources(resources)
    snap = {}
    for path in res["paths"]:
        snap["path:" + path] = read_path(path)
    for root in res["trees"]:
        for rel, line in read_tree(root).items():
            snap["tree:%s:%s" % (root, rel)] = line
    if res["packages"]:
        _rc, out, _err = run_command(["dpkg-query", "-W", "-f", "${binary:Package}\t${Version}\t${Status}\n"] + res["packages"])
        found = parse_dpkg_query(out)
        for name in res["packages"]:
            snap["package:" + name] = found.get(name, "absent")
    if res["units"]:
        rc, out, err = run_command(["systemctl", "show", "-p", "Id,UnitFileState,ActiveState", "--"] + res["units"])
        found = parse_systemctl_show(out) if rc == 0 else {}
        for unit in res["units"]:
            snap["unit:" + unit] = found.get(unit, "unreadable rc=%d %s" % (rc, err.strip()[:200]))
    for name in res["users"]:
        snap["user:" + name] = read_user(name)
    for name in res["groups"]:
        snap["group:" + name] = read_group(name)
    for cmd in res["commands"]:
        try:
            rc, out, _err = run_command(cmd["argv"])
        except Exception as exc:  # pylint: disable=broad-except
            rc, out = 127, str(exc)
        key = "command:" + " ".join(cmd["argv"])
        if cmd["compare"] == "rc":
            snap[key] = "rc:%d" % rc
        else:
            snap[key] = "rc:%d stdout:%s" % (rc, hashlib.sha256(out.encode("utf-8", "surrogateescape")).hexdigest())
    return snap


BASELINE_NAME = "baseline.json"
BASELINE_VERSION = 1
DPKG_ALL = ["dpkg-query", "-W", "-f", "${binary:Package}\t${Version}\t${Status}\n"]


def merge_resources(old, new):
    """The union of two resource specs (normalized)."""
    old, new = normalize_resources(old), normalize_resources(new)
    out = {}
    for kind in RESOURCE_KINDS:
        if kind == "commands":
            seen = {digest(c): c for c in old[kind] + new[kind]}
            out[kind] = [seen[k] for k in sorted(seen)]
        else:
            out[kind] = sorted(set(old[kind]) | set(new[kind]))
    return out


def update_baseline(baseline, role, resources, run_command):
    """Add what the node has now of ``resources`` to the baseline, for every key it does not hold yet.

    The baseline is what the node had before the collection's roles changed it, read at the start of each role
    (before its first change) and never overwritten: the first value of a key stays. It is also the uninstall
    manifest: ``roles`` lists every resource each role ever said it manages, ``resources`` what was there before,
    one line per key as ``snapshot`` reads it (a tree's root only, a command's exit code only), and ``packages``
    every package installed before the first role ran (``dpkg-query -W``). Returns (baseline, added keys).
    """
    res = normalize_resources(resources)
    # every directory on the way to a path too: what the role creates with its parents (/opt/dgxspark, a drop-in
    # directory) is the collection's as well, and goes with it
    ancestors = set()
    for path in res["paths"] + res["trees"]:
        parent = os.path.dirname(path)
        while parent not in ("/", ""):
            ancestors.add(parent)
            parent = os.path.dirname(parent)
    res["paths"] = sorted(set(res["paths"]) | ancestors)
    if not isinstance(baseline, dict) or baseline.get("version") != BASELINE_VERSION:
        baseline = {"version": BASELINE_VERSION, "packages": None, "resources": {}, "roles": {}}
    known = baseline["resources"]
    if baseline.get("packages") is None:
        _rc, out, _err = run_command(DPKG_ALL)
        baseline["packages"] = {name: line for name, line in parse_dpkg_query(out).items()
                                if line.endswith(" ok installed")}
    want = {kind: [] for kind in RESOURCE_KINDS}
    added = {}
    for kind, prefix in (("paths", "path:"), ("packages", "package:"), ("units", "unit:"), ("users", "user:"),
                         ("groups", "group:")):
        want[kind] = [item for item in res[kind] if prefix + item not in known]
    for root in res["trees"]:
        if "tree:" + root not in known:
            added["tree:" + root] = read_path(root)
    for cmd in res["commands"]:
        if "command:" + " ".join(cmd["argv"]) not in known:
            want["commands"].append({"argv": cmd["argv"], "compare": "rc"})
    added.update(snapshot(want, run_command))
    known.update(added)
    baseline["roles"][role] = merge_resources(baseline["roles"].get(role), res)
    return baseline, sorted(added)


def compare(recorded, current, limit=10):
    """Human-readable differences between two snapshots (at most limit, then a count)."""
    lines = []
    for key in sorted(set(recorded) | set(current)):
        was, now = recorded.get(key, "not recorded"), current.get(key, "not read")
        if was != now:
            lines.append("%s: was %s, now %s" % (key, was, now))
    if len(lines) > limit:
        lines = lines[:limit] + ["... and %d more" % (len(lines) - limit)]
    return lines


def make_stamp(role, inputs, resources, snap):
    return {"version": STAMP_VERSION, "role": role, "inputs": inputs,
            "resources": normalize_resources(resources), "snapshot": snap}


def check_stamp(stamp, role, inputs, run_command):
    """(converged, [reasons]) for one role's stamp (None when there is none)."""
    if stamp is None:
        return False, ["%s: no stamp (no complete run recorded on this node)" % role]
    if not isinstance(stamp, dict) or stamp.get("version") != STAMP_VERSION or stamp.get("role") != role:
        return False, ["%s: stamp unreadable or of another version" % role]
    if stamp.get("inputs") != inputs:
        return False, ["%s: the inputs changed since the last complete run (variables, inventory or the collection)" % role]
    try:
        current = snapshot(stamp.get("resources"), run_command)
    except ConvergedError as exc:
        return False, ["%s: stamp unreadable (%s)" % (role, exc)]
    diff = compare(stamp.get("snapshot") or {}, current)
    return (not diff), ["%s: %s" % (role, line) for line in diff]


def stamp_path(directory, role):
    return os.path.join(directory, "%s.json" % role)


def load_stamp(path):
    try:
        with open(path, "r", encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}


def dump_stamp(stamp):
    return json.dumps(stamp, sort_keys=True, indent=1) + "\n"


# Variables that only choose how a run goes (the fast path or not, which stamps it compares), not what the
# roles do: they are no input of the roles. A run with one of them changed records the same digest, so the
# next run names what really drifted instead of "the inputs changed" (issue #20).
PATH_SWITCHES = ("preflight_fast_path", "preflight_fast_path_roles")
# Facts the fast path itself sets (preflight_site_inputs, preflight_site_record, preflight_site_converged).
SITE_FACT_PREFIX = "preflight_site_"


def site_input_names(names):
    """The variable names that count in the inputs digest: names less PATH_SWITCHES and preflight_site_*, sorted.

    ``names`` are the <role>_* and dgxspark_* variables the run sees, e.g.::

        ["clock_cap_max_mhz", "preflight_fast_path", "preflight_site_inputs", "dgxspark_fabric_rails"]
        -> ["clock_cap_max_mhz", "dgxspark_fabric_rails"]
    """
    return sorted({str(name) for name in names
                   if str(name) not in PATH_SWITCHES and not str(name).startswith(SITE_FACT_PREFIX)})


def complete_run(run_tags, skip_tags, roles, check_mode):
    """Whether a run converges every role completely (and so may record stamps and take the fast path).

    Not in check mode, no --tags (ansible_run_tags is ["all"]), and no --skip-tags that names a role
    (``<role>``), one of its tags (``<role>_*``) or ``always``. Tags that are none of the collection's,
    such as molecule's ``molecule-notest,notest``, leave every task in::

        complete_run(["all"], ["molecule-notest", "notest"], ["nic", "service"], False) -> True
        complete_run(["all"], ["service_health"], ["nic", "service"], False)            -> False
    """
    if check_mode or sorted(set(run_tags or ["all"])) != ["all"]:
        return False
    for tag in skip_tags or []:
        tag = str(tag)
        if tag == "always" or any(tag == role or tag.startswith(role + "_") for role in roles):
            return False
    return True


CONTENT_DIRS = ("roles", "plugins", "playbooks")


def content_digest(root, subdirs=CONTENT_DIRS):
    """sha256 over the relative path and bytes of every file under root/<subdir> (no __pycache__, no .pyc).

    A new version of the collection (a role's task, template or default, a plugin) is a new input:
    the next run converges in full and records again.
    """
    sha = hashlib.sha256()
    for sub in subdirs:
        base = os.path.join(root, sub)
        for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith(".pyc"):
                    continue
                full = os.path.join(dirpath, name)
                sha.update(os.path.relpath(full, root).encode("utf-8", "surrogateescape") + b"\0")
                try:
                    with open(full, "rb") as handle:
                        sha.update(handle.read())
                except OSError as exc:
                    sha.update(("unreadable %s" % exc.strerror).encode("utf-8"))
                sha.update(b"\0")
    return sha.hexdigest()
