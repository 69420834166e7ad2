"""Errors that a user can act on. Each carries an exit code and a hint.

Exit codes (stable, documented in the README):
  0  success
  1  unexpected internal error (a bug: please report it)
  2  bad usage: unknown recipe/target/precision, bad option
  3  parity failure: the artifact was built and measured, and did not pass
  4  plan rejected: the request cannot be met on that target (a recorded rejection)
  5  integrity failure: checkpoint pin mismatch, tampered bundle, bad signature
  6  missing prerequisite: a tool, SDK or package is not installed
  7  audit: at least one bundle fails a check (edge-export audit, report --strict)
  8  an AI Hub job outlived --timeout (job ids saved; rerun to resume)
  9  file system: a path could not be read or written (read-only, full disk, permissions, a file where a
     directory is needed); the message names the path
  130 / 143  interrupted by SIGINT (Ctrl-C) / SIGTERM: finished stages stay cached, nothing half-written is published
"""

from __future__ import annotations

import os


class EdgeExportError(Exception):
    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  fix: {self.hint}"


class UsageError(EdgeExportError):
    exit_code = 2


class UnknownNameError(UsageError):
    """An unknown recipe, target, precision or component, with the nearest names."""

    def __init__(self, kind: str, name: str, known: list[str]):
        from exporter.names import nearest

        close = nearest(name, known)
        hint = (f"did you mean {', '.join(repr(c) for c in close)}? " if close else "") + (
            f"known {kind}s: {', '.join(sorted(known))}"
        )
        super().__init__(f"unknown {kind} {name!r}", hint)
        self.kind = kind
        self.name = name
        self.suggestions = close


class ParityError(EdgeExportError):
    exit_code = 3


class PlanRejected(EdgeExportError):
    exit_code = 4


class IntegrityError(EdgeExportError):
    exit_code = 5


class MissingPrerequisite(EdgeExportError):
    exit_code = 6


class FileSystemError(EdgeExportError):
    """The operating system refused a file operation on a path the user chose (read-only, full, permissions)."""

    exit_code = 9


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived: unwinds like KeyboardInterrupt (every `finally` and staging cleanup runs) but is
    not caught by `except Exception` handlers, and is not turned into a silent exit code by the CLI framework."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


FS_ERRNO_FIX = {
    "ENOSPC": "the disk is full: free space there, or choose another --out / --cache",
    "EDQUOT": "the disk quota is exhausted: free space there, or choose another --out / --cache",
    "EROFS": "the file system is read-only: choose a writable --out / --cache / --output",
    "EACCES": "permission denied: check the path's owner and mode, or choose another location",
    "EPERM": "the operation is not permitted there (an immutable file or directory?): choose another location",
    "ENOTDIR": "a component of the path is a regular file, not a directory: choose a directory path",
    "EISDIR": "the path is a directory where a file is needed: name a file",
    "ENAMETOOLONG": "the path is too long: choose a shorter one",
    "EMFILE": "too many open files: raise the limit (ulimit -n) and rerun",
    "EIO": "an input/output error: check the disk",
    "EEXIST": "a file of that name exists where a directory is needed: choose another path",
    "ENOENT": "a directory on the path does not exist: create it or choose another path",
}


def filesystem_error(e: OSError) -> FileSystemError | None:
    """The FileSystemError for an OSError a user can act on, or None for one that is not about a path."""
    import errno

    name = errno.errorcode.get(e.errno or 0, "")
    if name not in FS_ERRNO_FIX or (name in ("ENOENT", "EEXIST") and not e.filename):
        return None
    where = f"{e.filename}" + (f" (-> {e.filename2})" if getattr(e, "filename2", None) else "") + ": " if e.filename is not None else ""
    fix = FS_ERRNO_FIX.get(name, "check the path and rerun")
    return FileSystemError(f"{where}{e.strerror or name}", fix)


def filesystem_error_in(exc: BaseException) -> FileSystemError | None:
    """A FileSystemError for an exception that is, wraps, or reports (Rust's "(os error N)", Python's "[Errno N]") an
    OSError about a path: libraries such as safetensors raise their own types for a full disk."""
    import re

    seen = set()
    e = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError):
            fs = filesystem_error(e)
            if fs is not None:
                return fs
        m = re.search(r"\(os error (\d+)\)|\[Errno (\d+)\]", str(e))
        if m:
            code = int(m.group(1) or m.group(2))
            fs = filesystem_error(OSError(code, os.strerror(code), getattr(e, "path", None)))
            if fs is not None:
                fs.message = f"{fs.message} ({type(e).__name__}: {str(e).splitlines()[0][:300]})"
                return fs
        e = e.__cause__ or e.__context__
    return None
