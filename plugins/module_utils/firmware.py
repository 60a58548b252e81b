# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The firmware a node reports, and how the nodes compare (stdlib only, pure but for ``read_esrt``): the system
firmware where fwupd's UEFI plugin reads it, the EFI System Resource Table (ESRT) the kernel exports; the
ConnectX-7 firmware of each rail's RDMA device as ibstat prints it (``Firmware version: 28.45.4028``, the device's
``fw_ver`` in sysfs).

The kernel (drivers/firmware/efi/esrt.c) exports one directory per ESRT entry, root-readable only (0400)::

    /sys/firmware/efi/esrt/entries/entry0/fw_class                      "<guid>\\n"   (efi_guid_to_str)
    /sys/firmware/efi/esrt/entries/entry0/fw_type                       "%u\\n"
    /sys/firmware/efi/esrt/entries/entry0/fw_version                    "%u\\n"
    /sys/firmware/efi/esrt/entries/entry0/lowest_supported_fw_version   "%u\\n"
    /sys/firmware/efi/esrt/entries/entry0/capsule_flags                 "0x%x\\n"
    /sys/firmware/efi/esrt/entries/entry0/last_attempt_version          "%u\\n"
    /sys/firmware/efi/esrt/entries/entry0/last_attempt_status           "%u\\n"

fw_type and last_attempt_status are the UEFI specification's ESRT codes (the names fwupd's uefi-capsule plugin
prints). A capsule update (fwupdmgr) is staged and flashed at the next boot; its outcome is last_attempt_status.
The collection reads and reports; it never updates firmware.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
from collections.abc import Mapping

ESRT_DIR = "firmware/efi/esrt/entries"
FIELDS = ("fw_class", "fw_type", "fw_version", "lowest_supported_fw_version", "capsule_flags",
          "last_attempt_version", "last_attempt_status")
FW_TYPES = {0: "unknown", 1: "system firmware", 2: "device firmware", 3: "UEFI driver"}
LAST_ATTEMPT = {0: "success", 1: "unsuccessful", 2: "insufficient resources", 3: "incorrect version",
                4: "invalid format", 5: "authentication error", 6: "AC power too low", 7: "battery too low"}


def _number(text):
    text = (text or "").strip()
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


def parse_entry(files):
    """One ESRT entry from its files' text ({name: text}); numbers as int, fw_class lower-case.

    >>> parse_entry({"fw_class": "ABC\\n", "fw_type": "1\\n", "fw_version": "65539\\n", "capsule_flags": "0x8010\\n"})["capsule_flags"]
    32784
    """
    entry = {}
    for name in FIELDS:
        text = files.get(name)
        if text is None:
            entry[name] = None
        elif name == "fw_class":
            entry[name] = text.strip().lower()
        else:
            entry[name] = _number(text)
    return entry


def read_esrt(sysfs_root="/sys"):
    """The node's ESRT entries in entry order, or None when the kernel exports no ESRT (not a UEFI boot).

    Raises OSError for an entry file that exists and cannot be read (the files are root-only)."""
    base = os.path.join(sysfs_root, ESRT_DIR)
    if not os.path.isdir(base):
        return None
    entries = []
    names = [n for n in os.listdir(base) if n.startswith("entry") and n[5:].isdigit()]
    for name in sorted(names, key=lambda n: int(n[5:])):
        files = {}
        for field in FIELDS:
            path = os.path.join(base, name, field)
            if os.path.exists(path):
                with open(path, encoding="utf-8", errors="replace") as handle:
                    files[field] = handle.read()
        entry = parse_entry(files)
        entry["entry"] = name
        entries.append(entry)
    return entries


def summary(entries):
    """{fw_class: 'system firmware 65539'} of a node's entries ({} for none, None for no ESRT)."""
    if entries is None:
        return None
    return {e["fw_class"]: "%s %s" % (FW_TYPES.get(e.get("fw_type"), "type %s" % e.get("fw_type")), e.get("fw_version"))
            for e in entries if e.get("fw_class")}


def failed_attempts(host, entries):
    """A line per entry whose last capsule update did not succeed (fwupdmgr's update did not apply at boot), each
    starting with "<host>: " when a host is given."""
    lines = []
    for e in entries or []:
        status = e.get("last_attempt_status")
        if status not in (None, 0):
            lines.append("%sthe last firmware update of %s (%s) did not apply: %s (ESRT last_attempt_status %s, "
                         "version %s attempted, %s running)"
                         % ("%s: " % host if host else "", FW_TYPES.get(e.get("fw_type"), "type %s" % e.get("fw_type")), e.get("fw_class"),
                            LAST_ATTEMPT.get(status, "status %s" % status), status, e.get("last_attempt_version"),
                            e.get("fw_version")))
    return lines


def _reference(by_host, head):
    """(the hosts sorted, the reference: ``head`` when it is one of them, else the first)."""
    hosts = sorted(by_host or {})
    return hosts, (head if head in (by_host or {}) else (hosts[0] if hosts else None))


def differences(esrt_by_host, head=None):
    """A line per node whose system firmware (ESRT class -> version) is not the head's, and per failed update.

    ``esrt_by_host``: {host: entries from read_esrt, or None}. The reference is ``head`` (else the first sorted).

    >>> e = lambda v: [{"fw_class": "c", "fw_type": 1, "fw_version": v, "last_attempt_status": 0}]
    >>> differences({"h": e(3), "w": e(2)}, head="h")
    ['w has system firmware 2 (c), h has system firmware 3']
    """
    hosts, reference = _reference(esrt_by_host, head)
    if not hosts:
        return []
    theirs = summary(esrt_by_host[reference])
    lines = []
    for host in hosts:
        lines.extend(failed_attempts(host, esrt_by_host[host]))
        if host == reference:
            continue
        mine = summary(esrt_by_host[host])
        if mine == theirs:
            continue
        if mine is None or theirs is None:
            lines.append("%s %s, %s %s" % (host, "exports no ESRT" if mine is None else "has an ESRT", reference,
                                           "exports none" if theirs is None else "has one"))
            continue
        for fw_class in sorted(set(mine) | set(theirs)):
            if mine.get(fw_class) != theirs.get(fw_class):
                lines.append("%s has %s (%s), %s has %s" % (host, mine.get(fw_class, "no entry"), fw_class, reference,
                                                            theirs.get(fw_class, "no entry")))
    return lines


def nic_versions(links):
    """{firmware version: [the rails' devices on it]} of one node's ``fabric_links`` (rails not read left out)."""
    found = {}
    for link in links or []:
        if isinstance(link, Mapping) and link.get("firmware"):
            found.setdefault(str(link["firmware"]), set()).add(str(link.get("device") or link.get("netdev") or "?"))
    return {version: sorted(devices) for version, devices in found.items()}


def nic_text(found, compact=False):
    """'28.45.4028 (rocep1s0f0, rocep1s0f1)' of nic_versions' result; compact: the version alone when there is one;
    '' when nothing was read."""
    if compact and len(found) == 1:
        return next(iter(found))
    return ", ".join("%s (%s)" % (version, ", ".join(devices)) for version, devices in sorted(found.items()))


def nic_differences(links_by_host, head=None):
    """Where the nodes' ConnectX-7 firmware differs: one line per node whose version set is not the head's.

    ``links_by_host``: {host: the host's ``fabric_links`` (each with ``device`` and ``firmware``)}. The reference
    is ``head`` (else the first host in sorted order). A node whose firmware was not read is named as such.

    >>> nic_differences({"h": [{"device": "rocep1s0f1", "firmware": "28.45.4028"}],
    ...                       "w": [{"device": "rocep1s0f1", "firmware": "28.39.1002"}]}, head="h")
    ['w has ConnectX-7 firmware 28.39.1002 (rocep1s0f1), h has 28.45.4028 (rocep1s0f1)']
    """
    hosts, reference = _reference(links_by_host, head)
    if not hosts:
        return []
    theirs = nic_versions(links_by_host[reference])
    lines = []
    if len(theirs) > 1:
        lines.append("%s has ConnectX-7 firmware %s: its own rails differ" % (reference, nic_text(theirs)))
    for host in hosts:
        if host == reference:
            continue
        mine = nic_versions(links_by_host[host])
        if sorted(mine) != sorted(theirs):
            lines.append("%s has ConnectX-7 firmware %s, %s has %s"
                         % (host, nic_text(mine) or "none read", reference, nic_text(theirs) or "none read"))
    return lines
