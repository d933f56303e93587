"""Letting the embedded server's OS user reach its data directory without opening it to anyone else.

Run as root, pgserver starts PostgreSQL as its own OS user (`pgserver`) and, so that this user can
reach the data directory, makes every folder above it readable and listable by everyone (g+rx,o+rx):
a 0700 home directory above STARK_PG_HOME then lets any local user read the files in it. Instead,
each folder that user cannot already pass through gets one POSIX ACL entry granting that user alone
the right to traverse it (`u:pgserver:--x`), which lists nothing and reads nothing; the folder's mode
bits and everyone else's access stay as they were.

The ACL is written as the kernel's `system.posix_acl_access` extended attribute, so no `setfacl` binary
is needed. A file system without ACLs makes the start fail in one line that says what to do.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from pathlib import Path

_ACCESS = "system.posix_acl_access"
_VERSION = 2
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_UNDEFINED = 0xFFFFFFFF
_EXECUTE = 0x1
_ENTRY = struct.Struct("<HHI")


class TraverseError(OSError):
    """A folder above the data directory cannot be opened to the server's OS user alone."""


def grant_traverse(path: Path, uid: int) -> list[Path]:
    """Every folder above `path` (not `path` itself) that OS user `uid` cannot pass through gets an ACL
    entry letting that user traverse it; returns the folders changed."""
    changed = []
    for folder in Path(path).absolute().parents:
        if _can_traverse(folder, uid):
            continue
        _add_user_execute(folder, uid)
        changed.append(folder)
    return changed


def _can_traverse(folder: Path, uid: int) -> bool:
    """Whether `uid` may pass through `folder` by its mode bits or an ACL entry naming it (a group it
    belongs to is not consulted: the server's user is made by pgserver, in no other group)."""
    info = folder.stat()
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_mode & stat.S_IXOTH:
        return True
    entries = _read(folder)
    mask = next((perm for tag, perm, _ in entries if tag == _MASK), 0x7)
    return any(tag == _USER and who == uid and perm & mask & _EXECUTE for tag, perm, who in entries)


def _read(folder: Path) -> list[tuple[int, int, int]]:
    """The folder's access ACL as (tag, perm, id) entries; its mode bits as the minimal ACL if it has none."""
    try:
        raw = os.getxattr(folder, _ACCESS)
    except OSError as exc:
        if exc.errno not in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
        mode = folder.stat().st_mode
        return [(_USER_OBJ, (mode >> 6) & 7, _UNDEFINED), (_GROUP_OBJ, (mode >> 3) & 7, _UNDEFINED),
                (_OTHER, mode & 7, _UNDEFINED)]
    (version,) = struct.unpack_from("<I", raw)
    if version != _VERSION:
        raise TraverseError(errno.EINVAL, f"{folder}: an ACL of unknown version {version}")
    return [_ENTRY.unpack_from(raw, offset) for offset in range(4, len(raw), _ENTRY.size)]


def _add_user_execute(folder: Path, uid: int) -> None:
    entries = {(tag, who): perm for tag, perm, who in _read(folder)}
    entries[(_USER, uid)] = entries.get((_USER, uid), 0) | _EXECUTE
    # the mask bounds the group class: it must let the new entry through, and must not widen what the
    # owning group (or anyone named) had: an existing mask only gains x; a new one is the group's bits + x
    existing = entries.get((_MASK, _UNDEFINED))
    entries[(_MASK, _UNDEFINED)] = (existing if existing is not None else entries[(_GROUP_OBJ, _UNDEFINED)]) | _EXECUTE
    ordered = sorted(entries.items(), key=lambda item: (item[0][0], item[0][1]))
    raw = struct.pack("<I", _VERSION) + b"".join(_ENTRY.pack(tag, perm, who) for (tag, who), perm in ordered)
    try:
        os.setxattr(folder, _ACCESS, raw)
    except OSError as exc:
        raise TraverseError(exc.errno, f"cannot let the embedded server's OS user (uid {uid}) pass through "
                                       f"{folder} without opening it to everyone: {exc.strerror} (the file system "
                                       f"needs POSIX ACLs); set STARK_PG_HOME to a folder whose parents others "
                                       f"may traverse (o+x)") from None
