# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks on a Hugging Face hub cache holding one pinned checkpoint (stdlib only).

The layout huggingface_hub writes (``HF_HUB_CACHE``, one folder per repo)::

    <cache>/models--deepseek-ai--DeepSeek-V4-Flash-0731/
        blobs/<sha256>                    an LFS file (safetensors shard), named by its sha256
        blobs/<git blob sha1>             a small file (config.json, README.md), named by its git blob id
        blobs/<etag>.incomplete           a download in progress (or interrupted)
        refs/main                         the commit sha, exactly 40 bytes, no newline
        snapshots/<sha>/<path>            relative symlinks ../../blobs/<etag> (subdirectories too)
        trees/<sha>.json                  huggingface_hub >= 2 caches the tree listing here

A revision-pinned download (``hf download --revision <sha>``) does not write
refs/main; an offline start (HF_HUB_OFFLINE=1) resolving ``main`` then fails
with LocalEntryNotFoundError, and a ref with a trailing newline names no
snapshot at all. ``verify_cache`` reports every such problem as a dict::

    {"kind": "missing_shard", "path": "snapshots/<sha>/model-00003-of-00048.safetensors",
     "detail": "named in model.safetensors.index.json, not in the snapshot"}

The manifest (what the hub says the revision holds; the checkpoint role
fetches it before downloading) has this shape::

    {"repo_id": "deepseek-ai/DeepSeek-V4-Flash-0731", "revision": "<sha>",
     "last_modified": "2026-08-01T00:00:00+00:00", "readme_head": "---\\nlicense: mit...",
     "files": {"model-00001-of-00048.safetensors": {"size": 3460000000, "blob": "<sha256>", "lfs": true},
               "config.json": {"size": 1834, "blob": "<git blob sha1>", "lfs": false}}}
"""

from __future__ import annotations

import datetime
import errno
import hashlib
import json
import os
import re
import stat

from ansible_collections.dgxspark.cluster.plugins.module_utils import safe_dirs

HEX40 = re.compile(r"^[0-9a-f]{40}$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
INDEX_NAME = "model.safetensors.index.json"
README_NAME = "README.md"
README_LIMIT = 65536

# Kinds a re-sync from the head repairs (data missing or wrong on this node).
REPAIRABLE = frozenset([
    "missing_repo", "missing_snapshot", "ref_missing", "ref_newline", "ref_mismatch", "missing_shard",
    "missing_file", "incomplete", "dangling_symlink", "size_mismatch", "hash_mismatch", "stray_blob",
    "blob_mismatch",
])


def repo_folder(repo_id, repo_type="model"):
    """The cache folder of a repo: ``deepseek-ai/DeepSeek-V4-Flash-0731`` -> ``models--deepseek-ai--DeepSeek-V4-Flash-0731``."""
    return "%ss--%s" % (repo_type, "--".join(repo_id.split("/")))


def is_commit(text):
    """True for a full 40-hex commit sha (lower case, as the hub writes it)."""
    return bool(HEX40.match(text or ""))


def problem(kind, path, detail):
    """One finding: ``{"kind", "path" (relative to the repo folder, or ""), "detail"}``."""
    return {"kind": kind, "path": path, "detail": detail}


# --------------------------------------------------------------------------- refs


def check_ref(raw, revision, ref_name="main"):
    """Problems with the content of refs/<ref_name> (bytes, or None when the file is absent).

    ``b"9e165c...cb"`` -> []; ``b"9e165c...cb\\n"`` -> ref_newline; another sha -> ref_mismatch.
    """
    path = "refs/%s" % ref_name
    if raw is None:
        return [problem("ref_missing", path, "absent: an offline start resolving %r fails with "
                        "LocalEntryNotFoundError (a revision-pinned download does not write it)" % ref_name)]
    text = raw.decode("utf-8", "replace")
    if text == revision:
        return []
    if text.strip() == revision:
        return [problem("ref_newline", path, "holds %r: the sha with surrounding whitespace names no snapshot; "
                        "expected exactly the 40-byte sha" % text)]
    return [problem("ref_mismatch", path, "holds %r, expected %s" % (text[:80], revision))]


def read_ref(repo_dir, ref_name="main"):
    """The raw bytes of refs/<ref_name>, or None: absent, a link (never followed) or not a regular file.

    The ref is opened relative to descriptors of the repo folder and ``refs`` (``safe_dirs.open_directory``: no link
    on the way is followed where a less trusted user could have planted it), with ``O_NOFOLLOW | O_NONBLOCK``, and
    checked to be a regular file after opening: a FIFO planted there neither blocks the open nor the read.
    """
    try:
        repo_fd = safe_dirs.open_directory(repo_dir)
    except (OSError, safe_dirs.UnsafePath):
        return None
    try:
        try:
            refs_fd = safe_dirs.open_child_directory(repo_fd, "refs", os.path.join(repo_dir, "refs"))
        except (OSError, safe_dirs.UnsafePath):
            return None
        try:
            return _read_regular(refs_fd, ref_name, 4096)
        finally:
            os.close(refs_fd)
    finally:
        os.close(repo_fd)


def _read_regular(dir_fd, name, limit):
    """Up to ``limit`` bytes of the regular file ``name`` in ``dir_fd``; None when absent, a link or no regular file."""
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0), dir_fd=dir_fd)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENXIO):
            return None
        raise
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        return handle.read(limit)


class LinkRefused(OSError):
    """A path a root step would act on is (or passes through) a symlink in a tree a less trusted user owns."""


def link_problems(repo_dir):
    """Paths (relative to ``repo_dir``) where a link stands in the way of a root step, each with why.

    The repo folder, ``refs``, ``blobs``, ``snapshots`` and every directory below them must be real directories
    and every ref and blob a regular file; the only links allowed are the snapshot files' (they point into
    ``blobs``). The checkpoint user owns this tree (and hf and its dependencies run as it), and the head's
    transfer key can write it (rrsync -wo; ``--force`` is refused before rrsync runs): a link here would point
    root's chown, write or delete anywhere on the node. Nothing is followed (lstat, ``os.walk(followlinks=False)``).
    """
    found = []
    if os.path.islink(repo_dir):
        return [("", "the repo folder is a link (to %s)" % os.readlink(repo_dir))]
    if not os.path.isdir(repo_dir):
        return []
    for top in ("refs", "blobs", "snapshots"):
        path = os.path.join(repo_dir, top)
        if os.path.islink(path):
            found.append((top, "a link (to %s), expected a directory" % os.readlink(path)))
    for base, dirs, files in os.walk(repo_dir, followlinks=False):
        rel = os.path.relpath(base, repo_dir)
        top = "" if rel == "." else rel.split(os.sep, maxsplit=1)[0]
        for name in dirs:
            full = os.path.join(base, name)
            where = os.path.relpath(full, repo_dir)
            if os.path.islink(full) and where not in ("refs", "blobs", "snapshots"):
                found.append((where, "a link to a directory (%s), expected a directory" % os.readlink(full)))
        for name in files:
            full = os.path.join(base, name)
            if os.path.islink(full) and top != "snapshots":
                found.append((os.path.relpath(full, repo_dir), "a link (to %s), expected a regular file"
                              % os.readlink(full)))
    return sorted(found)


def _no_link(path):
    if os.path.islink(path):
        raise LinkRefused("%s is a link (to %s): refused, nothing written" % (path, os.readlink(path)))


def _open_repo_dir(repo_dir, what):
    """A descriptor of the repo folder, walked without following a link a less trusted user could plant."""
    _no_link(repo_dir)
    try:
        return safe_dirs.open_directory(repo_dir)
    except safe_dirs.UnsafePath as error:
        raise LinkRefused("%s: refused, nothing %s" % (error, what))


def _open_child(dir_fd, name, path, what):
    try:
        return safe_dirs.open_child_directory(dir_fd, name, path)
    except safe_dirs.UnsafePath as error:
        raise LinkRefused("%s: refused, nothing %s" % (error, what))


def write_ref(repo_dir, revision, ref_name="main", uid=-1, gid=-1):
    """Make refs/<ref_name> hold exactly ``revision`` (no newline), atomically; True when it changed.

    Root acts only through descriptors: the repo folder and ``refs`` are opened without following a link
    (``LinkRefused`` names the path), ``refs`` is made with mkdirat when missing, the temporary file is created in
    that descriptor with O_NOFOLLOW|O_EXCL, chowned through its own descriptor, and renamed over the ref inside
    the same directory (renameat): a ``refs`` swapped for a link after the checks is never followed, the write
    lands in the directory that was opened. A ref that is a link is refused; one that is no regular file (a FIFO)
    is read as absent and replaced, never opened for writing.
    """
    if not is_commit(revision):
        raise ValueError("not a 40-hex commit sha: %r" % revision)
    if "/" in ref_name or ref_name in ("", ".", ".."):
        raise ValueError("not a plain ref name: %r" % ref_name)
    refs = os.path.join(repo_dir, "refs")
    target = os.path.join(refs, ref_name)
    repo_fd = _open_repo_dir(repo_dir, "written")
    try:
        try:
            os.mkdir("refs", 0o755, dir_fd=repo_fd)
        except FileExistsError:
            pass
        refs_fd = _open_child(repo_fd, "refs", refs, "written")
        try:
            try:
                info = os.stat(ref_name, dir_fd=refs_fd, follow_symlinks=False)
            except FileNotFoundError:
                info = None
            if info is not None and stat.S_ISLNK(info.st_mode):
                raise LinkRefused("%s is a link (to %s): refused, nothing written"
                                  % (target, os.readlink(ref_name, dir_fd=refs_fd)))
            if _read_regular(refs_fd, ref_name, 4096) == revision.encode():
                return False
            tmp = ".%s.%d.tmp" % (ref_name, os.getpid())
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                         | getattr(os, "O_CLOEXEC", 0), 0o644, dir_fd=refs_fd)
            try:
                os.write(fd, revision.encode())
                os.fchmod(fd, 0o644)
                if uid != -1 or gid != -1:
                    os.fchown(fd, uid, gid)
            finally:
                os.close(fd)
            if uid != -1 or gid != -1:
                os.fchown(refs_fd, uid, gid)
            os.replace(tmp, ref_name, src_dir_fd=refs_fd, dst_dir_fd=refs_fd)
            return True
        finally:
            os.close(refs_fd)
    finally:
        os.close(repo_fd)


# --------------------------------------------------------------------------- hashing


def sha256_file(path, chunk=1 << 22):
    """Hex sha256 of a file's content (the name of an LFS blob)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def git_blob_sha1(path, chunk=1 << 22):
    """Hex git blob id of a file: sha1(b"blob <size>\\0" + content) (the name of a small file's blob)."""
    digest = hashlib.sha1()  # nosec - git's object id, not a security use
    digest.update(b"blob %d\x00" % os.path.getsize(path))
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def blob_kind(name):
    """``"sha256"`` for a 64-hex blob name, ``"git"`` for 40-hex, ``"incomplete"``, else None (stray)."""
    if name.endswith(".incomplete"):
        return "incomplete"
    if HEX64.match(name):
        return "sha256"
    if HEX40.match(name):
        return "git"
    return None


def blob_hash_matches(path, name):
    """Does the blob's content hash to its name (sha256 for 64-hex names, git blob sha1 for 40-hex)?"""
    kind = blob_kind(name)
    if kind == "sha256":
        return sha256_file(path) == name
    if kind == "git":
        return git_blob_sha1(path) == name
    return False


# --------------------------------------------------------------------------- lookalikes


def parse_date(text):
    """A date from ``2026-08-01``, ``2026-08-01T00:00:00.000Z`` or ``2026-08-01T00:00:00+00:00``; None if empty."""
    if not text:
        return None
    value = str(text).strip()
    match = re.match(r"^(\d{4})-(\d{2})-(\d{2})", value)
    if not match:
        raise ValueError("not a date: %r" % value)
    return datetime.date(int(match.group(1)), int(match.group(2)), int(match.group(3)))


def lookalike_problems(repo_id, revision, expected_revision, commit_date, readme, lookalikes,
                       min_commit_date=None):
    """Why this checkpoint is not the pinned one, as problems of kind "lookalike" ([] when it is).

    ``lookalikes``: ``[{"name": "DeepSeek-V4-Flash-DSpark", "repo_id": "deepseek-ai/DeepSeek-V4-Flash-DSpark",
    "date": "2026-07-04", "readme_marker": ""}, ...]``. They share the architecture and shard
    count with the real one; the repo id, the revision, the commit date and the README tell them apart.
    """
    found = []
    readme = readme or ""
    date = parse_date(commit_date) if commit_date else None
    for look in lookalikes or []:
        name = look.get("name") or look.get("repo_id")
        reasons = []
        if look.get("repo_id") and look["repo_id"] == repo_id:
            reasons.append("repo id %s" % repo_id)
        if look.get("readme_marker") and look["readme_marker"] in readme:
            reasons.append("README says %r" % look["readme_marker"])
        if look.get("date") and date is not None and parse_date(look["date"]) == date:
            reasons.append("commit dated %s" % date.isoformat())
        if look.get("revision") and look["revision"] == revision:
            reasons.append("revision %s" % revision)
        if reasons:
            found.append(problem("lookalike", "", "this is %s, not the pinned checkpoint (%s)"
                                 % (name, ", ".join(reasons))))
    if expected_revision and revision != expected_revision:
        found.append(problem("lookalike", "", "revision %s is not the pinned %s" % (revision, expected_revision)))
    if min_commit_date and date is not None and date < parse_date(min_commit_date):
        found.append(problem("lookalike", "", "commit dated %s, older than %s: an earlier checkpoint "
                             "(same architecture and shard count)" % (date.isoformat(), parse_date(min_commit_date))))
    return found


def manifest_problems(manifest, repo_id, revision):
    """Is the manifest the one of this repo and revision, and well formed?"""
    found = []
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict) or not manifest["files"]:
        return [problem("bad_manifest", "", "the manifest lists no files")]
    if manifest.get("repo_id") not in (None, repo_id):
        found.append(problem("revision_mismatch", "", "manifest is for %s, expected %s" % (manifest["repo_id"], repo_id)))
    if manifest.get("revision") != revision:
        found.append(problem("revision_mismatch", "", "manifest is for revision %s, expected %s"
                             % (manifest.get("revision"), revision)))
    for path, meta in sorted(manifest["files"].items()):
        if not isinstance(meta, dict) or not isinstance(meta.get("size"), int) or blob_kind(str(meta.get("blob"))) \
                not in ("sha256", "git"):
            found.append(problem("bad_manifest", path, "entry %r lacks an int size or a hex blob id" % (meta,)))
    return found


# --------------------------------------------------------------------------- walking


def walk_snapshot(snapshot_dir):
    """Every file below a snapshot: ``{relpath: {"link": target or None, "blob": name or None, "real": path}}``.

    Relative paths use "/" and are relative to the snapshot (``encoding/encoding_dsv4.py``).
    """
    entries = {}
    for root, dirs, files in os.walk(snapshot_dir, followlinks=False):
        dirs.sort()
        for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(root, d))]):
            full = os.path.join(root, name)
            rel = os.path.relpath(full, snapshot_dir).replace(os.sep, "/")
            link = os.readlink(full) if os.path.islink(full) else None
            entries[rel] = {"link": link, "blob": os.path.basename(link) if link else None, "real": full}
    return entries


def fingerprint(repo_dir, skip_top=("trees",)):
    """A cheap identity of a repo folder: sha256 over (path, size, whole-second mtime) of files and
    (path, target) of symlinks, sorted; no content is read. Two copies made with ``rsync -a`` match.

    ``skip_top`` leaves out top-level folders whose content is per-node bookkeeping (none by default
    beyond ``trees``, huggingface_hub's listing cache, which a later online call may rewrite).
    Returns ``{"fingerprint": hex, "files": n, "bytes": total}``.
    """
    digest = hashlib.sha256()
    count = 0
    total = 0
    if not os.path.isdir(repo_dir):
        return {"fingerprint": "", "files": 0, "bytes": 0}
    for root, dirs, files in os.walk(repo_dir, followlinks=False):
        rel_root = os.path.relpath(root, repo_dir).replace(os.sep, "/")
        if rel_root == ".":
            dirs[:] = [d for d in dirs if d not in skip_top]
        dirs.sort()
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]
        for name in sorted(files + links):
            full = os.path.join(root, name)
            rel = os.path.relpath(full, repo_dir).replace(os.sep, "/")
            info = os.lstat(full)
            if os.path.islink(full):
                digest.update(("l\0%s\0%s\n" % (rel, os.readlink(full))).encode("utf-8", "surrogateescape"))
            else:
                digest.update(("f\0%s\0%d\0%d\n" % (rel, info.st_size, int(info.st_mtime))).encode("utf-8", "surrogateescape"))
                total += info.st_size
            count += 1
    return {"fingerprint": digest.hexdigest(), "files": count, "bytes": total}


def blob_bytes(repo_dir):
    """Bytes on disk under blobs/ (finished and ``.incomplete``): what a download has written so far."""
    total = 0
    try:
        with os.scandir(os.path.join(repo_dir, "blobs")) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
    except FileNotFoundError:
        return 0
    return total


def prune_plan(repo_dir, revision):
    """What removing every other revision from a repo folder removes: the other ``snapshots/<sha>`` folders and
    the blobs no link of ``snapshots/<revision>`` uses. ``{"snapshots": [rel...], "blobs": [rel...], "bytes": n}``;
    nothing when the revision's snapshot is missing (a broken copy is never pruned)."""
    snapshot = os.path.join(repo_dir, "snapshots", revision)
    plan = {"snapshots": [], "blobs": [], "bytes": 0}
    if not is_commit(revision) or not os.path.isdir(snapshot):
        return plan
    used = {entry["blob"] for entry in walk_snapshot(snapshot).values() if entry["blob"]}
    for name in sorted(os.listdir(os.path.join(repo_dir, "snapshots"))):
        if name != revision:
            plan["snapshots"].append("snapshots/" + name)
    for path in blob_paths(repo_dir):
        name = os.path.basename(path)
        if name not in used:
            plan["blobs"].append("blobs/" + name)
            plan["bytes"] += os.path.getsize(path)
    return plan


def prune(repo_dir, plan):
    """Carry out a ``prune_plan``; returns the bytes freed.

    Root removes only through descriptors: the repo folder, ``snapshots`` and ``blobs`` are opened without
    following a link (``LinkRefused`` names it, nothing removed), each snapshot tree is removed relative to the
    ``snapshots`` descriptor (``shutil.rmtree(dir_fd=...)``, which never follows a link inside the tree), each blob
    is unlinked relative to the ``blobs`` descriptor, and a planned name that turned into a link is removed as the
    link, never followed.
    """
    import shutil
    repo_fd = _open_repo_dir(repo_dir, "removed")
    freed = 0
    try:
        for top, rels in (("snapshots", plan["snapshots"]), ("blobs", plan["blobs"])):
            names = [rel.split("/", 1)[1] for rel in rels if rel.startswith(top + "/")]
            names = [n for n in names if n and "/" not in n and n not in (".", "..")]
            if not names:
                continue
            try:
                top_fd = _open_child(repo_fd, top, os.path.join(repo_dir, top), "removed")
            except FileNotFoundError:
                continue
            try:
                for name in names:
                    try:
                        info = os.stat(name, dir_fd=top_fd, follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    if stat.S_ISDIR(info.st_mode):
                        shutil.rmtree(name, dir_fd=top_fd)
                        continue
                    if stat.S_ISREG(info.st_mode) and top == "blobs":
                        freed += info.st_size
                    os.unlink(name, dir_fd=top_fd)
            finally:
                os.close(top_fd)
    finally:
        os.close(repo_fd)
    return freed


def blobs_present(repo_dir, blobs):
    """``(present, missing)`` bytes of these blobs (``{name: size}``) under blobs/: only a blob finished at its
    listed size counts; blobs of other revisions do not count.

    An unfinished one counts nothing, whatever it holds: huggingface_hub 2.x downloads every file into a new
    process-unique ``<etag>.<suffix>.incomplete`` and never resumes an older one (file_download._download_to_tmp_and_move),
    and rsync ``--partial`` builds a new temporary copy beside the partial file it keeps under the blob's name.
    Either way the rest of the blob needs its whole size free, beside the partial file until the blob is done.
    """
    present = 0
    missing = 0
    base = os.path.join(repo_dir, "blobs")
    for name, size in sorted((blobs or {}).items()):
        size = int(size)
        try:
            done = os.lstat(os.path.join(base, name))
            finished = stat.S_ISREG(done.st_mode) and done.st_size == size
        except OSError:
            finished = False
        present += size if finished else 0
        missing += 0 if finished else size
    return present, missing


# --------------------------------------------------------------------------- the check


def verify_cache(cache_dir, repo_id, revision, manifest=None, full_hash=False, ref_name="main",
                 lookalikes=None, min_commit_date=None, check_lookalike=True):
    """Check one pinned checkpoint in a hub cache; returns a report::

        {"ok": bool, "problems": [{"kind", "path", "detail"}], "repair": ["blobs/<sha256>", ...],
         "repo_dir": ..., "snapshot": ..., "files": n, "shards": n, "bytes": n,
         "fingerprint": hex, "hashed_bytes": n}

    Problem kinds: missing_repo, missing_snapshot, ref_missing, ref_newline, ref_mismatch,
    bad_index, missing_index, missing_shard, missing_file, incomplete, stray_blob, dangling_symlink,
    link_outside, size_mismatch, blob_mismatch, hash_mismatch, bad_manifest, revision_mismatch, lookalike.
    ``repair`` names the paths (relative to the repo folder) a re-transfer must rewrite even
    when size and mtime look right (corrupted content).
    Cheap by default (names, sizes, links, and the small files' git blob ids: the code and configs);
    ``full_hash`` re-hashes every blob the snapshot uses, the shards too.
    """
    repo_dir = os.path.join(cache_dir, repo_folder(repo_id))
    snapshot_rel = "snapshots/%s" % revision
    snapshot = os.path.join(repo_dir, "snapshots", revision)
    report = {"ok": False, "problems": [], "repair": [], "repo_dir": repo_dir, "snapshot": snapshot,
              "files": 0, "shards": 0, "bytes": 0, "fingerprint": "", "hashed_bytes": 0}
    found = report["problems"]
    if not is_commit(revision):
        found.append(problem("revision_mismatch", "", "%r is not a 40-hex commit sha: pin the checkpoint to a commit"
                             % revision))
        return report
    if manifest is not None:
        found.extend(manifest_problems(manifest, repo_id, revision))
    if not os.path.isdir(repo_dir):
        found.append(problem("missing_repo", "", "%s does not exist" % repo_dir))
        return report
    identity = fingerprint(repo_dir)
    report["fingerprint"] = identity["fingerprint"]
    report["bytes"] = identity["bytes"]
    if not os.path.isdir(snapshot):
        others = sorted(os.listdir(os.path.join(repo_dir, "snapshots"))) if os.path.isdir(
            os.path.join(repo_dir, "snapshots")) else []
        found.append(problem("missing_snapshot", snapshot_rel, "no snapshot for %s%s" % (
            revision, (" (snapshots present: %s)" % ", ".join(others)) if others else "")))
    found.extend(check_ref(read_ref(repo_dir, ref_name), revision, ref_name))

    blobs_dir = os.path.join(repo_dir, "blobs")
    blob_names = sorted(os.listdir(blobs_dir)) if os.path.isdir(blobs_dir) else []
    for name in blob_names:
        kind = blob_kind(name)
        if kind == "incomplete":
            found.append(problem("incomplete", "blobs/" + name, "an unfinished download"))
            report["repair"].append("blobs/" + name)
        elif kind is None:
            found.append(problem("stray_blob", "blobs/" + name, "not a blob name (sha256 or git blob id): "
                                 "an interrupted copy's temporary file?"))
            report["repair"].append("blobs/" + name)

    entries = walk_snapshot(snapshot) if os.path.isdir(snapshot) else {}
    report["files"] = len(entries)
    blobs_real = os.path.realpath(blobs_dir)
    sizes = {}
    for rel, entry in sorted(entries.items()):
        where = "%s/%s" % (snapshot_rel, rel)
        if entry["link"] is not None:
            target = os.path.realpath(entry["real"])
            if not os.path.exists(entry["real"]):
                found.append(problem("dangling_symlink", where, "-> %s resolves to nothing" % entry["link"]))
                if entry["blob"] and blob_kind(entry["blob"]) in ("sha256", "git"):
                    report["repair"].append("blobs/" + entry["blob"])
                continue
            if os.path.dirname(target) != blobs_real:
                found.append(problem("link_outside", where, "-> %s resolves outside %s/blobs (a shared store a "
                                     "per-repo copy leaves dangling)" % (entry["link"], repo_folder(repo_id))))
                continue
        try:
            sizes[rel] = os.path.getsize(entry["real"])
        except OSError as error:
            found.append(problem("dangling_symlink", where, str(error)))

    index_path = os.path.join(snapshot, INDEX_NAME)
    if os.path.isdir(snapshot):
        if os.path.exists(index_path):
            try:
                with open(index_path, encoding="utf-8") as handle:
                    index = json.load(handle)
                shards = sorted(set((index.get("weight_map") or {}).values()))
                if not shards:
                    raise ValueError("empty weight_map")
            except (OSError, ValueError, AttributeError) as error:
                found.append(problem("bad_index", "%s/%s" % (snapshot_rel, INDEX_NAME), "unreadable: %s" % error))
                shards = []
            report["shards"] = len(shards)
            for shard in shards:
                if shard not in sizes and not any(p["path"] == "%s/%s" % (snapshot_rel, shard) for p in found):
                    found.append(problem("missing_shard", "%s/%s" % (snapshot_rel, shard),
                                         "named in %s, not in the snapshot" % INDEX_NAME))
        elif "model.safetensors" in sizes:
            report["shards"] = 1
        elif INDEX_NAME not in entries:
            found.append(problem("missing_index", "%s/%s" % (snapshot_rel, INDEX_NAME),
                                 "no %s and no model.safetensors" % INDEX_NAME))

    if manifest is not None and isinstance(manifest.get("files"), dict):
        for rel, meta in sorted(manifest["files"].items()):
            where = "%s/%s" % (snapshot_rel, rel)
            if not isinstance(meta, dict):
                continue
            entry = entries.get(rel)
            if entry is None:
                if not any(p["path"] == where for p in found):
                    found.append(problem("missing_file", where, "listed by the hub for %s, absent" % revision))
                if blob_kind(str(meta.get("blob"))) in ("sha256", "git"):
                    report["repair"].append("blobs/%s" % meta["blob"])
                continue
            if rel not in sizes:
                continue
            if entry["blob"] is not None and entry["blob"] != meta.get("blob"):
                found.append(problem("blob_mismatch", where, "links to blob %s, the hub names %s"
                                     % (entry["blob"], meta.get("blob"))))
            if sizes[rel] != meta.get("size"):
                found.append(problem("size_mismatch", where, "%d bytes, the hub says %s" % (sizes[rel], meta.get("size"))))
                if entry["blob"]:
                    report["repair"].append("blobs/" + entry["blob"])

    # The small (non-LFS) files are hashed on every verify: they are the code run with trust-remote-code
    # (encoding/encoding_dsv4.py, the model's .py files) and the configs, a few hundred kB in all, and a same-size
    # rewrite passes a check of names and sizes. The shards (sha256 names, ~167 GB) only with full_hash.
    for rel, entry in sorted(entries.items()):
        if rel not in sizes or entry["blob"] is None:
            continue
        kind = blob_kind(entry["blob"])
        if kind not in ("sha256", "git") or (kind == "sha256" and not full_hash):
            continue
        report["hashed_bytes"] += sizes[rel]
        if not blob_hash_matches(entry["real"], entry["blob"]):
            found.append(problem("hash_mismatch", "%s/%s" % (snapshot_rel, rel),
                                 "content does not hash to its blob name %s" % entry["blob"]))
            report["repair"].append("blobs/" + entry["blob"])

    if check_lookalike:
        readme = ""
        readme_path = os.path.join(snapshot, README_NAME)
        if os.path.exists(readme_path):
            with open(readme_path, "rb") as handle:
                readme = handle.read(README_LIMIT).decode("utf-8", "replace")
        elif manifest:
            readme = manifest.get("readme_head") or ""
        date = (manifest or {}).get("last_modified")
        found.extend(lookalike_problems(repo_id, revision, None, date, readme, lookalikes or [], min_commit_date))

    report["repair"] = sorted(set(report["repair"]))
    report["ok"] = not found
    return report


def summarize(problems, limit=8):
    """Problems as one line each, at most ``limit`` (then "... and N more")."""
    lines = ["%s %s: %s" % (p["kind"], p["path"] or "-", p["detail"]) for p in problems[:limit]]
    if len(problems) > limit:
        lines.append("... and %d more" % (len(problems) - limit))
    return lines


# --------------------------------------------------------------------------- page cache


def evict_page_cache(paths, sync=True):
    """Flush, then drop these files' pages: ``fdatasync`` first (the pages a sync or a download just
    wrote are dirty, and DONTNEED leaves dirty pages in place), then ``posix_fadvise`` DONTNEED. The
    weights otherwise squat on GB10's unified memory pool. Returns the bytes advised."""
    advised = 0
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            if sync:
                os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            advised += os.fstat(fd).st_size
        finally:
            os.close(fd)
    return advised


def resident_bytes(path):
    """Bytes of a file in the page cache now, from mincore(2) over a read-only mapping (0 for an empty
    or unreadable file). ``fincore`` reports the same."""
    import ctypes
    import mmap as _mmap
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return 0
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
        addr = libc.mmap(None, size, _mmap.PROT_READ, _mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return 0
        try:
            page = _mmap.PAGESIZE
            pages = (size + page - 1) // page
            vec = (ctypes.c_ubyte * pages)()
            if libc.mincore(ctypes.c_void_p(addr), size, vec) != 0:
                return 0
            resident = sum(1 for v in vec if v & 1)
        finally:
            libc.munmap(ctypes.c_void_p(addr), size)
        return min(size, resident * page)
    finally:
        os.close(fd)


def blob_paths(repo_dir):
    """Every regular file under blobs/."""
    blobs = os.path.join(repo_dir, "blobs")
    if not os.path.isdir(blobs):
        return []
    return [os.path.join(blobs, name) for name in sorted(os.listdir(blobs))
            if os.path.isfile(os.path.join(blobs, name))]


# --------------------------------------------------------------------------- progress


def human_bytes(count):
    """``1536`` -> ``"1.5 KB"``; decimal units, as download tools print them."""
    value = float(count)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return ("%d %s" % (value, unit)) if unit == "B" else ("%.1f %s" % (value, unit))
        value /= 1000.0
    return "%.1f TB" % value


def human_duration(seconds):
    """``75`` -> ``"1 min 15 s"``, ``5400`` -> ``"1 h 30 min"``."""
    seconds = int(round(seconds))
    if seconds < 60:
        return "%d s" % seconds
    if seconds < 3600:
        return "%d min %d s" % (seconds // 60, seconds % 60)
    return "%d h %d min" % (seconds // 3600, (seconds % 3600) // 60)


def progress(done, total, now, previous_done=None, previous_time=None):
    """Progress of a transfer between two samples::

        {"done": 12300000000, "total": 167000000000, "percent": 7.4, "rate": 105000000.0,
         "eta": 1378.0, "msg": "12.3 GB of 167.0 GB (7.4%), 105.0 MB/s, 22 min 58 s left"}

    ``rate`` is bytes/s since the previous sample (None without one), ``eta`` seconds left at that rate.
    """
    percent = (100.0 * done / total) if total else 0.0
    rate = None
    if previous_done is not None and previous_time is not None and now > previous_time:
        rate = max(0.0, (done - previous_done) / (now - previous_time))
    eta = (max(0, total - done) / rate) if rate else None
    parts = ["%s of %s (%.1f%%)" % (human_bytes(done), human_bytes(total), percent)]
    parts.append(("%s/s" % human_bytes(rate)) if rate is not None else "rate pending")
    parts.append(("%s left" % human_duration(eta)) if eta is not None else "time left unknown")
    return {"done": done, "total": total, "percent": round(percent, 1), "rate": rate, "eta": eta,
            "time": now, "msg": ", ".join(parts)}
