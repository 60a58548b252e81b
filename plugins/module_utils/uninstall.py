# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What ``uninstall.yml`` removes from a node, and what it restores: a plan made from the baseline (stdlib only).

The baseline (``/var/lib/dgxspark/converged/baseline.json``, written by ``converged`` with ``state=baseline`` at the
start of every role, before its first change) holds, per role, every resource the role ever said it manages, and
what the node had of each before the collection touched it; plus every package installed before the first role ran.
The plan compares that with what the node has now:

- a path, tree, user or group that was absent is removed (a directory with everything in it: the collection made
  it); one that was there is left, and named when it differs from what it was (the collection changed it);
- a unit that did not exist is stopped and disabled before its file or package goes; one that existed is put back
  in its unit-file state (enabled, disabled, masked) and its active state (earlyoom, which preflight masks);
- a package not installed before is purged, and so are the packages its install pulled in (apt's autoremove list,
  less every package installed before); a package held now that was not held before is released;
- an image ``docker image inspect`` did not find before is removed;
- kept unless asked: the driver's and CUDA's packages (``packages``), the checkpoint's trees and the user and group
  that own them (``checkpoint``); a directory holding something kept stays, with what is kept in it.
"""

from __future__ import annotations

import os

DRIVER_ROLES = ("driver", "cuda")
CHECKPOINT_ROLE = "checkpoint"
IMAGE_INSPECT = ["docker", "image", "inspect"]


def _absent(line):
    return line is None or line == "absent"


def _unit_absent(line):
    """systemctl show answers an unknown unit with an empty UnitFileState (read as '-')."""
    return line is None or line.split(" ", 1)[0] in ("-", "")


def _below(path, root):
    return path == root or path.startswith(root.rstrip("/") + "/")


def union(baseline):
    """{kind: sorted items} over every role of the baseline (of the commands, the image inspections only)."""
    kinds = ("paths", "trees", "packages", "units", "users", "groups")
    out = {kind: set() for kind in kinds}
    out["commands"] = []
    for _role, res in sorted((baseline.get("roles") or {}).items()):
        for kind in kinds:
            out[kind].update(res.get(kind) or [])
        for cmd in res.get("commands") or []:
            if cmd.get("argv", [])[:3] == IMAGE_INSPECT and cmd not in out["commands"]:
                out["commands"].append(cmd)
    return {kind: (sorted(v) if kind != "commands" else v) for kind, v in out.items()}


def read_spec(baseline):
    """The resources to read now (trees as their root path only, image commands by exit code)."""
    res = union(baseline)
    return {"paths": sorted(set(res["paths"]) | set(res["trees"])), "packages": res["packages"],
            "units": res["units"], "users": res["users"], "groups": res["groups"],
            "commands": [{"argv": c["argv"], "compare": "rc"} for c in res["commands"]]}


def shape_problem(baseline):
    """Why a loaded baseline cannot be planned from (None when it can)."""
    if not isinstance(baseline, dict) or baseline.get("version") != 1:
        return "not a baseline of version 1"
    for key in ("roles", "resources", "packages"):
        if not isinstance(baseline.get(key) or {}, dict):
            return "%s is not a mapping" % key
    for role, res in baseline["roles"].items():
        if not isinstance(res, dict):
            return "roles.%s is not a mapping" % role
    return None


def plan(baseline, current, installed, packages=False, checkpoint=False):
    """The uninstall plan for one node.

    ``current``: {key: line} as ``converged.snapshot(read_spec(baseline))`` reads it now. ``installed``: {package:
    'version status'} of every package installed now. Returns a dict of lists (see the module's RETURN).
    """
    res = union(baseline)
    before = baseline.get("resources") or {}
    had = baseline.get("packages") or {}
    roles = baseline.get("roles") or {}
    out = {key: [] for key in ("stop_units", "restore_units", "remove_paths", "kept", "left", "remove_users",
                               "remove_groups", "purge", "unhold", "remove_images")}

    kept_trees = [] if checkpoint else list((roles.get(CHECKPOINT_ROLE) or {}).get("trees") or [])
    kept_users = set() if checkpoint else set((roles.get(CHECKPOINT_ROLE) or {}).get("users") or [])
    kept_groups = set() if checkpoint else set((roles.get(CHECKPOINT_ROLE) or {}).get("groups") or [])
    protected = set()
    if not packages:
        for role in DRIVER_ROLES:
            protected.update((roles.get(role) or {}).get("packages") or [])

    # units: what did not exist is stopped (its file or package goes); what existed gets its states back
    unit_files = set()
    for path in res["paths"]:
        name = os.path.basename(path)
        if "/systemd/system/" in path and name.endswith((".service", ".timer", ".socket", ".path")) \
                and _absent(before.get("path:" + path)) and not _absent(current.get("path:" + path)):
            unit_files.add(name)
    for unit in res["units"]:
        was, now = before.get("unit:" + unit), current.get("unit:" + unit)
        if _unit_absent(was):
            if not _unit_absent(now):
                unit_files.add(unit)
        elif was != now and not _unit_absent(now):
            file_state, active = (was.split(" ", 1) + ["-"])[:2]
            out["restore_units"].append({"unit": unit, "unit_file_state": file_state, "active": active == "active",
                                         "was": was, "now": now})
    out["stop_units"] = sorted(unit_files)    # every other list is built from sorted, unique items

    # a kept user keeps its home (what the collection put in it goes)
    kept_homes = {}
    for name in kept_users:
        line = current.get("user:" + name) or ""
        for field in line.split(" "):
            if field.startswith("home:") and _absent(before.get("user:" + name)):
                kept_homes[field[len("home:"):]] = name

    # paths and trees: deepest first
    paths = sorted(set(res["paths"]) | set(res["trees"]), key=lambda p: (-p.count("/"), p))
    for path in paths:
        was, now = before.get("path:" + path, before.get("tree:" + path)), current.get("path:" + path)
        if _absent(now):
            continue
        holds = [tree for tree in kept_trees if _below(tree, path)]
        if holds:
            out["kept"].append({"item": path, "why": "holds the checkpoint (%s); uninstall_checkpoint keeps it"
                                % ", ".join(sorted(holds))})
        elif path in kept_homes:
            out["kept"].append({"item": path, "why": "the home of %s, who stays with the checkpoint" % kept_homes[path]})
        elif _absent(was):
            out["remove_paths"].append(path)
        elif was != now:
            out["left"].append({"item": path, "why": "was there before the collection and differs now "
                                "(was %s, now %s): left as it is" % (was, now)})

    # users and groups the collection created
    for name in res["users"]:
        if _absent(before.get("user:" + name)) and not _absent(current.get("user:" + name)):
            if name in kept_users:
                out["kept"].append({"item": "user " + name, "why": "owns the checkpoint, which stays"})
            else:
                out["remove_users"].append(name)
    for name in res["groups"]:
        if _absent(before.get("group:" + name)) and not _absent(current.get("group:" + name)):
            if name in kept_groups:
                out["kept"].append({"item": "group " + name, "why": "owns the checkpoint, which stays"})
            else:
                out["remove_groups"].append(name)

    # packages: purge what was not installed before; release holds that were not there before
    for name in res["packages"]:
        now = installed.get(name)
        if now is None:
            continue
        if name not in had:
            if name in protected:
                out["kept"].append({"item": "package " + name, "why": "the driver's or CUDA's; uninstall_packages "
                                    "removes it"})
            else:
                out["purge"].append(name)
        if now.split(" ")[-3:-2] == ["hold"] and name not in out["purge"] \
                and not (had.get(name) or "").split(" ")[-3:-2] == ["hold"]:
            out["unhold"].append(name)

    # images pulled: docker image inspect failed before, answers now
    for cmd in res["commands"]:
        key = "command:" + " ".join(cmd["argv"])
        if before.get(key, "rc:1") != "rc:0" and current.get(key) == "rc:0":
            out["remove_images"].append(cmd["argv"][3])
    return out


def parse_autoremove(text):
    """Package names apt-get -s autoremove --purge would remove ('Purg name [version]' / 'Remv name [version]')."""
    names = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("Purg", "Remv"):
            names.append(parts[1].split(":", 1)[0])
    return sorted(set(names))


def summary(node, result, check):
    """One line per kind for the report."""
    verb = "would" if check else "did"
    lines = []
    for key, what in (("stop_units", "stop and disable"), ("remove_images", "remove the images"),
                      ("remove_paths", "remove"), ("remove_users", "remove the users"),
                      ("remove_groups", "remove the groups"), ("purge", "purge the packages"),
                      ("autoremove", "purge what those pulled in"), ("unhold", "release the holds on"),
                      ("restore_units", "restore")):
        items = result.get(key) or []
        if items:
            shown = [i["unit"] + " to " + i["unit_file_state"] if isinstance(i, dict) else i for i in items]
            lines.append("%s: %s %s: %s" % (node, verb, what, ", ".join(shown)))
    for key, what in (("kept", "kept"), ("left", "left")):
        for item in result.get(key) or []:
            lines.append("%s: %s %s (%s)" % (node, what, item["item"], item["why"]))
    if not lines:
        lines.append("%s: nothing the collection installed is left" % node)
    return lines
