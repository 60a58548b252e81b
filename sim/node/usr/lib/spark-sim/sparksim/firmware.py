"""The node's system firmware as the kernel exports it: the EFI System Resource Table under the stand-in sysfs.

    <root>/firmware/efi/esrt/entries/entry<N>/fw_class                      "<guid>\\n"
    <root>/firmware/efi/esrt/entries/entry<N>/{fw_type,fw_version,lowest_supported_fw_version,
                                              last_attempt_version,last_attempt_status}   "%u\\n"
    <root>/firmware/efi/esrt/entries/entry<N>/capsule_flags                 "0x%x\\n"

Formats and modes (0400: root only) from the kernel's drivers/firmware/efi/esrt.c (esre_attr_decl). The entries
come from ``state["firmware"]["esrt"]`` (a list of dicts with those keys), else DEFAULT_ESRT. No capture of a GB10's
ESRT exists in the ledger: the default's class GUID and versions are placeholders (sim/SOURCES.md); what a check may
rely on is only that the nodes agree or not, and last_attempt_status.
"""

from __future__ import annotations

from typing import Any

# placeholder values (no capture): one system-firmware entry, its last update applied
DEFAULT_ESRT = [{"fw_class": "5370a4c5-0000-4000-8000-00000000e5a7", "fw_type": 1, "fw_version": 65539,
                 "lowest_supported_fw_version": 65536, "capsule_flags": 0x8010, "last_attempt_version": 65539,
                 "last_attempt_status": 0}]
_DECIMAL = ("fw_type", "fw_version", "lowest_supported_fw_version", "last_attempt_version", "last_attempt_status")


def esrt_entries(state: dict[str, Any]) -> list[dict[str, Any]]:
    entries = (state.get("firmware") or {}).get("esrt")
    return DEFAULT_ESRT if entries is None else entries


def esrt_files(state: dict[str, Any]) -> dict[str, str]:
    """{path below esrt/: text} of the table, as the kernel prints each file (rdma.write_sysfs writes them 0400)."""
    files = {}
    for index, entry in enumerate(esrt_entries(state)):
        base = "entries/entry%d/" % index
        files[base + "fw_class"] = "%s\n" % str(entry["fw_class"]).lower()
        files[base + "capsule_flags"] = "0x%x\n" % int(entry.get("capsule_flags", 0))
        files.update({base + name: "%d\n" % int(entry.get(name, 0)) for name in _DECIMAL})
    return files
