"""Crash-safe directory writes: build in a hidden temporary sibling, fsync, rename into place.

A killed run leaves at most a hidden staging directory (`.tmp-NAME-OWNER-RANDOM`) or a superseded one
(`.old-NAME-OWNER`), never a half-written directory under the final name, and every reader skips hidden names (the
audit, the matrix, records). OWNER is `PID` x the process's start time (clock ticks since boot, /proc/PID/stat), so
a later run can prove the writer dead even after its PID was reused, and removes what it left (`sweep_stale`).
Published directories and files get the permissions the umask gives (mkdtemp/mkstemp would leave them 0700/0600,
unreadable to a runtime service under another account).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
from functools import lru_cache
from pathlib import Path

_STALE = re.compile(r"^\.(?:tmp|old)-.+-(?P<pid>\d+)x(?P<start>\d+)-[0-9a-f]{8}$")


def _start_ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])  # field 22, counted after the command name


@lru_cache(maxsize=None)
def _owner_of(pid: int) -> str:
    return f"{pid}x{_start_ticks(pid) or 0}"


def owner() -> str:
    """This process as a staging owner: PID x start time (0 where /proc is absent); a forked copy is its own owner."""
    return _owner_of(os.getpid())


def owner_alive(pid: int, start: int) -> bool:
    if pid == os.getpid():
        return f"{pid}x{start}" == owner()
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    now = _start_ticks(pid)
    return now is None or start == 0 or now == start


def sweep_stale(directory: Path) -> list[Path]:
    """Remove the staging and superseded entries in `directory` whose writer is provably dead; returns them."""
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for e in entries:
        m = _STALE.match(e.name)
        if not m or owner_alive(int(m.group("pid")), int(m.group("start"))):
            continue
        p = Path(e.path)
        if e.is_dir(follow_symlinks=False):
            shutil.rmtree(p, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                p.unlink()
        removed.append(p)
    return removed


def sweep_tree(root: Path, max_depth: int = 6) -> list[Path]:
    """`sweep_stale` in `root` and its subdirectories (an output root: bundle parents, the stage cache, records)."""
    removed = []
    root = Path(root)
    if not root.is_dir():
        return removed
    for base, dirs, _files in os.walk(root):
        removed += sweep_stale(Path(base))
        if len(Path(base).relative_to(root).parts) >= max_depth:
            dirs[:] = []
        else:
            dirs[:] = [d for d in dirs if not _STALE.match(d)]
    return removed


def _umask() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def fsync_tree(path: Path) -> None:
    for root, _dirs, files in os.walk(path):
        for f in files:
            fd = os.open(os.path.join(root, f), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fd = os.open(root, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def publishable(path: Path) -> None:
    """Give a staged tree the permissions the umask allows (directories 0777, files 0666, less the umask)."""
    mask = _umask()
    for root, dirs, files in os.walk(path):
        os.chmod(root, 0o777 & ~mask)
        for d in dirs:
            p = os.path.join(root, d)
            if not os.path.islink(p):
                os.chmod(p, 0o777 & ~mask)
        for f in files:
            p = os.path.join(root, f)
            if not os.path.islink(p):
                mode = os.stat(p).st_mode
                os.chmod(p, (0o777 if mode & 0o111 else 0o666) & ~mask)


@contextlib.contextmanager
def staging_dir(final: Path):
    """Yield a fresh hidden directory beside `final`; on success it replaces `final` atomically."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale(final.parent)
    tmp = final.parent / f".tmp-{final.name}-{owner()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        yield tmp
        publishable(tmp)
        fsync_tree(tmp)
        replace_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def replace_dir(src: Path, final: Path) -> None:
    """Move `src` to `final`; an existing `final` is moved aside first (hidden, owner-tagged), then removed."""
    old = None
    if final.exists():
        old = final.with_name(f".old-{final.name}-{owner()}-{secrets.token_hex(4)}")
        os.rename(final, old)
    os.rename(src, final)
    dfd = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}-{owner()}-{secrets.token_hex(4)}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for any file
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))
