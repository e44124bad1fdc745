"""The file system's faults in words: why a write failed (no space left, a
read-only or unwritable folder, a file another process holds), checked
before writing where that can be known (free space, HDF5's lock), and
said as one :class:`pompy.errors.EnvironmentFault` naming the file.

netCDF4 reports most of these as ``RuntimeError: NetCDF: HDF error``,
so the cause is found by looking at the folder, not at the message.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

from pompy.errors import EnvironmentFault

# Below this many free bytes a failed write is put down to a full disk:
# HDF5 needs a few pages for the metadata of any record.
FULL_BYTES = 1 << 20

_CAUSES = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
           errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
           errno.EPERM: "not writable (operation not permitted)",
           errno.EAGAIN: "locked by another process", errno.EFBIG: "the file is too large"}


def free_bytes(path: Path) -> int | None:
    """Bytes free to this user on the file system of ``path`` (its nearest
    existing folder), or None where that cannot be told."""
    folder = Path(path)
    try:
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        stat = os.statvfs(folder)
    except OSError:                    # a folder this user may not enter
        return None
    return stat.f_bavail * stat.f_frsize


def megabytes(n: int) -> str:
    return f"{n / 1e6:.3g} MB"


def cause(path: Path, err: BaseException) -> str:
    """Why writing ``path`` failed: from the error's errno, else from the
    folder (full, not writable), else the library's own words."""
    free = free_bytes(path)            # first: netCDF4 says EACCES on a full disk
    if free is not None and free < FULL_BYTES:
        return f"no space left on the device ({megabytes(free)} free)"
    code = getattr(err, "errno", None)
    if code in _CAUSES:
        return _CAUSES[code]
    folder = Path(path).parent
    with contextlib.suppress(OSError):
        if folder.is_dir() and not writable(folder):
            return f"its folder {folder} is not writable"
    text = getattr(err, "strerror", None) or str(err)
    return " ".join(text.split()) or type(err).__name__


def writable(folder: Path) -> bool:
    """Whether this process (its effective user) may make files in ``folder``."""
    try:
        return folder.is_dir() and os.access(
            folder, os.W_OK | os.X_OK, effective_ids=os.access in os.supports_effective_ids)
    except OSError:
        return False


def fault(path: Path, err: BaseException, doing: str) -> EnvironmentFault:
    """One line: ``<path>: <cause> (<doing>)``."""
    return EnvironmentFault(f"{path}: {cause(path, err)} ({doing})")


def check_room(path: Path, need: int, doing: str) -> None:
    """EnvironmentFault before writing ``need`` bytes to ``path`` where its
    file system has less free (a write stopped before it starts leaves the
    file as it was, readable)."""
    free = free_bytes(path)
    if free is not None and free < need:
        raise EnvironmentFault(f"{path}: no space left on the device ({megabytes(free)} free, "
                               f"{doing} needs about {megabytes(need)})")


def _locked(path: Path, lock: int) -> bool:
    """Whether another process holds an HDF5 lock on ``path`` that ``lock``
    (LOCK_EX: to replace it; LOCK_SH: to read it) cannot be taken beside;
    False for a missing file or a file system without flock. OSError where
    the file cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)      # a FIFO does not wait
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, lock | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def check_unlocked(path: Path) -> None:
    """EnvironmentFault if another process holds ``path`` open through HDF5
    (netCDF4, xarray, ncview take its lock): replacing it under them is
    refused rather than done behind their back."""
    try:
        locked = _locked(path, fcntl.LOCK_EX)
    except OSError as err:
        raise fault(path, err, "opening it to replace it") from None
    if locked:
        raise EnvironmentFault(f"{path}: locked by another process (a NetCDF/HDF5 reader has it "
                               "open); close it there, or give another --output")


def check_not_being_written(path: Path, what: str = "file") -> None:
    """EnvironmentFault if another process holds ``path`` open for writing
    through HDF5 (its exclusive lock, which a reader cannot share): a file
    that cannot be read then is busy, not broken."""
    try:
        locked = _locked(path, fcntl.LOCK_SH)
    except OSError:
        return                          # unreadable: the caller's message says so
    if locked:
        raise EnvironmentFault(f"{what} {path}: locked by another process writing it; read it "
                               "once that is done")


def check_writable_folder(folder: Path, what: str = "output folder") -> None:
    """EnvironmentFault unless ``folder`` can be made and written in."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise fault(folder, err, f"making the {what}") from None
    if not writable(folder):
        read_only = os.statvfs(folder).f_flag & os.ST_RDONLY
        raise EnvironmentFault(f"{what} {folder} is not writable"
                               + (" (a read-only file system)" if read_only else ""))
