# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Create or fix directories as root without following a link someone else could plant (stdlib only).

A check (stat) then a create or chown/chmod by path lets whoever owns the parent swap the entry for a
symbolic link in between, and root then acts on the link's target. Here every step works on file
descriptors instead:

- the path is walked from ``/`` one component at a time (``openat``); a link is followed only where it sits
  in a directory that root owns and no one else can write (only root can have put it there), and then its
  target is walked the same way; a link anywhere else fails naming the path;
- a missing directory is made with ``mkdirat`` (which refuses an existing name, a link included), then opened
  with ``O_NOFOLLOW | O_DIRECTORY`` and given its owner and mode through ``fchown``/``fchmod``: whatever is
  swapped in afterwards, the calls reach the directory that was made;
- an existing directory is opened the same way (a link there: ELOOP, refused) and fixed through its descriptor;
- a ``parent`` entry is only created when missing (an existing parent keeps its owner and mode).

Missing intermediate directories are made root:root 0755. ``ensure`` raises ``UnsafePath`` with a message
naming the path and what was found.
"""

from __future__ import annotations

import errno
import os
import stat

_DIR_FLAGS = os.O_RDONLY | getattr(os, 'O_DIRECTORY', 0) | getattr(os, 'O_CLOEXEC', 0)
_NOFOLLOW = getattr(os, 'O_NOFOLLOW', 0)
MAX_LINKS = 40


class UnsafePath(Exception):
    pass


def _trusted(info):
    """Only root can change the entries of this directory."""
    return info.st_uid == 0 and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _open_dir(name, dir_fd, path):
    try:
        return os.open(name, _DIR_FLAGS | _NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # Linux answers ENOTDIR for a link with O_DIRECTORY
            try:
                link = stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
            except OSError:
                link = False
            if link or exc.errno == errno.ELOOP:
                raise UnsafePath('%s is a symbolic link (it appeared while this step ran); expected a directory' % path)
            raise UnsafePath('%s is not a directory' % path)
        raise UnsafePath('cannot open %s: %s' % (path, exc.strerror))


def _walk_parent(path, create, made):
    """An fd of ``path``'s parent directory, walked from / without following an untrusted link."""
    if not os.path.isabs(path) or os.path.normpath(path) != path or path == '/':
        raise UnsafePath('%s is not an absolute, normalised path below /' % path)
    todo = path.split('/')[1:-1]
    where = ''
    fd = os.open('/', _DIR_FLAGS)
    links = 0
    try:
        while todo:
            name = todo.pop(0)
            if name in ('', '.'):
                continue
            if name == '..':
                raise UnsafePath('%s: a link on the way leads through ..; refusing it' % path)
            here = where + '/' + name
            parent_info = os.fstat(fd)
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if not create:
                    return None, ''
                os.mkdir(name, 0o755, dir_fd=fd)
                made.append(here)
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                if not _trusted(parent_info) or info.st_uid != 0:
                    raise UnsafePath('%s is a symbolic link in a directory another user controls (on the way to %s); '
                                     'expected a directory' % (here, path))
                links += 1
                if links > MAX_LINKS:
                    raise UnsafePath('%s: too many symbolic links on the way' % path)
                target = os.readlink(name, dir_fd=fd)
                if target.startswith('/'):
                    os.close(fd)
                    fd = os.open('/', _DIR_FLAGS)
                    where = ''
                todo = target.split('/') + todo
                continue
            nfd = _open_dir(name, fd, here)
            os.close(fd)
            fd, where = nfd, here
        return fd, where
    except BaseException:
        os.close(fd)
        raise


def ensure(path, uid, gid, mode, parent=False, check=False):
    """Make ``path`` a directory owned uid:gid with ``mode``; returns 'created', 'fixed' or None (as it was).

    With ``parent``, an existing directory is left as it is. With ``check``, nothing is changed and the
    answer says what would be done.
    """
    made = []
    fd = _walk_parent(path, create=not check, made=made)[0]
    if fd is None:  # check mode, an ancestor missing
        return 'created'
    name = os.path.basename(path)
    try:
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        if info is None:
            if check:
                return 'created'
            try:
                os.mkdir(name, 0o700, dir_fd=fd)
            except FileExistsError:
                raise UnsafePath('%s appeared while this step ran; refusing to touch it' % path)
            dfd = _open_dir(name, fd, path)
            try:
                os.fchown(dfd, uid, gid)
                os.fchmod(dfd, mode)
            finally:
                os.close(dfd)
            return 'created'
        if stat.S_ISLNK(info.st_mode):
            raise UnsafePath('%s is a symbolic link; expected a directory (a link is not followed)' % path)
        if not stat.S_ISDIR(info.st_mode):
            raise UnsafePath('%s is not a directory' % path)
        if parent:
            return None
        dfd = _open_dir(name, fd, path)
        try:
            now = os.fstat(dfd)
            wrong = (now.st_uid, now.st_gid) != (uid, gid) or stat.S_IMODE(now.st_mode) != mode
            if wrong and not check:
                os.fchown(dfd, uid, gid)
                os.fchmod(dfd, mode)
        finally:
            os.close(dfd)
        return 'fixed' if wrong else None
    finally:
        os.close(fd)


def open_directory(path):
    """An ``O_NOFOLLOW`` descriptor of the existing directory ``path``, walked from ``/`` as ``ensure`` walks it.

    A link on the way is followed only where root alone could have put it; a link at ``path`` itself, or on the way
    in a directory another user can write, raises ``UnsafePath`` naming it; a missing component raises
    ``FileNotFoundError``. The caller works relative to the descriptor (``dir_fd=``) and closes it: whatever is swapped
    in by path afterwards, its calls reach the directory that was opened.
    """
    fd = _walk_parent(path, create=False, made=[])[0]
    if fd is None:
        raise FileNotFoundError(errno.ENOENT, 'No such file or directory', path)
    try:
        return open_child_directory(fd, os.path.basename(path), path)
    finally:
        os.close(fd)


def open_child_directory(dir_fd, name, path):
    """An ``O_NOFOLLOW`` descriptor of the directory ``name`` inside ``dir_fd`` (``path`` names it in messages)."""
    if not name or '/' in name or name in ('.', '..'):
        raise UnsafePath('%s: not a plain name' % path)
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, 'No such file or directory', path)
    if stat.S_ISLNK(info.st_mode):
        raise UnsafePath('%s is a symbolic link (to %s); expected a directory (a link is not followed)'
                         % (path, os.readlink(name, dir_fd=dir_fd)))
    return _open_dir(name, dir_fd, path)


def _remove_entries(dir_fd, path):
    """Remove everything inside the directory ``dir_fd`` (``path`` names it), never following a link."""
    for name in os.listdir(dir_fd):
        here = path + '/' + name
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            child = _open_dir(name, dir_fd, here)
            try:
                _remove_entries(child, here)
            finally:
                os.close(child)
            os.rmdir(name, dir_fd=dir_fd)
        else:
            os.unlink(name, dir_fd=dir_fd)     # a link is removed itself, its target never reached


def remove(path, check=False, only_empty=False):
    """Remove ``path`` (a file, a link, or a directory with everything in it) without following a link.

    The parent is walked from ``/`` as ``ensure`` walks it (a link on the way is followed only where root alone could
    have put it); the entry and everything below it are removed through descriptors (``unlinkat``, ``openat`` with
    ``O_NOFOLLOW``), so an entry swapped for a link meanwhile is removed as the link, its target never touched.
    Returns 'removed', or None when nothing was there; with ``only_empty`` a directory that is not empty is left
    and 'not empty' returned. With ``check``, nothing is changed and the answer says what would be done.
    """
    fd = _walk_parent(path, create=False, made=[])[0]
    if fd is None:
        return None
    name = os.path.basename(path)
    try:
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if not stat.S_ISDIR(info.st_mode):
            if not check:
                os.unlink(name, dir_fd=fd)
            return 'removed'
        dfd = _open_dir(name, fd, path)
        try:
            if only_empty and os.listdir(dfd):
                return 'not empty'
            if not check:
                _remove_entries(dfd, path)
        finally:
            os.close(dfd)
        if not check:
            os.rmdir(name, dir_fd=fd)
        return 'removed'
    finally:
        os.close(fd)
