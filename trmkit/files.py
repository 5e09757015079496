"""The one way trmkit writes a file: whole or not at all.

Every file a run, a store, a bundle or a command writes goes through `atomic_write`
(or `write_json` / `write_text` on top of it): the bytes go to a hidden temporary
file in the same folder, are flushed and fsync'd, and only then renamed over the
target; the folder is fsync'd after the rename so the new name survives a crash.
A reader sees the old file or the new one, never half of one.

A target that exists and is not a regular file (a device such as /dev/null, a
FIFO, a socket, a folder) is refused with a clear error: renaming over it would
replace it (as root, `--out /dev/null` would become a regular file).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator

TMP_PREFIX = ".tmp-"  # hidden temporary siblings; a crash can leave one behind, never a half target

# errors a filesystem gives when a directory cannot be fsync'd at all (not a failed write)
_DIR_FSYNC_UNSUPPORTED = (errno.EINVAL, errno.EBADF, errno.ENOTSUP, errno.EACCES, errno.EPERM)


class UnsafeTargetError(OSError):
    """The path exists and is not a regular file: writing would replace something that is not ours."""


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename or a creation inside `path` durable.

    A no-op where the platform cannot open a directory (Windows) or the filesystem does not
    support fsync on one; a real I/O error (EIO, ENOSPC) is raised."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as err:
        if err.errno in _DIR_FSYNC_UNSUPPORTED:
            return
        raise
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno not in _DIR_FSYNC_UNSUPPORTED:
            raise
    finally:
        os.close(fd)


def check_target(path: str | os.PathLike[str]) -> Path:
    """`path`, if writing there can only create or replace a regular file; else UnsafeTargetError."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return path
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a device, FIFO or socket)"
        raise UnsafeTargetError(f"{path} exists and is {kind}: trmkit writes only regular files; "
                                "give another path (or '-' for standard output where the command allows it)")
    return path


def check_output(out: str | os.PathLike[str], reads: Iterable[str | os.PathLike[str]], flag: str = "--out",
                 inside_ok: Iterable[str | os.PathLike[str]] = ()) -> Path:
    """`out`, unless writing it could destroy something the command reads: else UnsafeTargetError.

    Refused, after resolving links: `out` is one of `reads` (or a hard link to one), lies inside a
    folder of `reads` (a file of the bundle, run or mailbox being read), or holds one of them (a
    folder output renamed over it would delete it). A new path inside a folder of `inside_ok` is
    allowed (a bundle exported into the run it comes from). `out` itself is checked by
    `check_target` where it names an existing special file."""
    path = Path(out)
    target = path.resolve()
    allowed = {Path(p).resolve() for p in inside_ok}
    for read in reads:
        if str(read) == "-":
            continue
        source = Path(read).resolve()
        if target == source or _same_file(path, Path(read)):
            raise UnsafeTargetError(f"{flag} {out} is {read}, which this command reads: writing there would destroy "
                                    "it; give a new path")
        if source in target.parents and source not in allowed:
            raise UnsafeTargetError(f"{flag} {out} lies inside {read}, which this command reads: writing there "
                                    "could change or break what it reads; write outside it")
        if target in source.parents:
            raise UnsafeTargetError(f"{flag} {out} holds {read}, which this command reads: writing there could "
                                    "delete it; give a new path outside it")
    return path


def check_overwrite(out: str | os.PathLike[str], force: bool = False, own: Callable[[Path], bool] | None = None,
                    flag: str = "--out", what: str = "output") -> Path:
    """`out`, unless it is an existing file this command did not write as its own kind of output: then
    UnsafeTargetError, naming the file and the fix (`--force`, or a new path).

    The one output policy of every command that writes: a new path is fine; an existing path is replaced
    only with `force`, or where `own(path)` recognises it as this command's own `what` (a predictions file
    written by the same command, say). An empty file counts as nothing to lose. A folder or special file is
    refused by `check_target` whatever `force` says."""
    path = check_target(out)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return path
    if force or size == 0 or (own is not None and own(path)):
        return path
    raise UnsafeTargetError(f"{flag} {out} exists and is not {what} written by this command: it would be replaced; "
                            f"give a new path, or add --force to replace it")


def _same_file(a: Path, b: Path) -> bool:
    """Both exist and are the same file (a hard link counts)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def temp_sibling(path: str | os.PathLike[str]) -> Path:
    """A fresh hidden name next to `path` (same filesystem, so the rename is atomic)."""
    path = Path(path)
    return path.with_name(f"{TMP_PREFIX}{path.name}.{os.getpid()}-{os.urandom(3).hex()}")


def write_chunks(f: IO[bytes], chunks: Iterable[bytes | memoryview]) -> str:
    """Write the chunks to an open file, flush and fsync it; the SHA-256 of all of them.

    Taking the data in pieces lets a large file (a checkpoint) reach the disk without ever
    being one bytes object in memory; hashing while writing saves reading it back."""
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
        f.write(chunk)
        del chunk  # let the producer free a copied block before it makes the next
    f.flush()
    os.fsync(f.fileno())
    return digest.hexdigest()


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "wb", encoding: str | None = None
                ) -> Iterator[IO[Any]]:
    """Open a temporary sibling of `path` for writing; on a clean exit it is fsync'd and renamed
    over `path`, on an exception it is removed and `path` is untouched."""
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_open writes whole files: mode 'wb' or 'w', not {mode!r}")
    path = check_target(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path)
    try:
        with open(tmp, mode, encoding=encoding if mode == "w" else None) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)


def atomic_write(path: str | os.PathLike[str], data: bytes | str | Iterable[bytes | memoryview]) -> str:
    """Write `data` (bytes, text as UTF-8, or chunks) to `path` atomically; the SHA-256 of what was written."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    chunks = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
    with atomic_open(path, "wb") as f:
        return write_chunks(f, chunks)


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    atomic_write(path, text)
    return Path(path)


def write_figure(path: str | os.PathLike[str], figure: Any, dpi: int = 100) -> Path:
    """A matplotlib figure as PNG at `path`, atomically: rendered in memory, then written as one file."""
    import io

    buf = io.BytesIO()
    figure.savefig(buf, format="png", dpi=dpi)
    atomic_write(path, buf.getbuffer())
    return Path(path)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):  # numpy and torch scalars
        return obj.item()
    return str(obj)


def to_json(obj: Any, indent: int | None = 2, sort_keys: bool = False) -> str:
    """JSON text as trmkit writes it: paths and numpy/torch scalars become plain values."""
    return json.dumps(obj, indent=indent, sort_keys=sort_keys, default=_json_default) + "\n"


def write_json(path: str | os.PathLike[str], obj: Any, indent: int | None = 2, sort_keys: bool = False) -> Path:
    """`obj` as JSON at `path`, atomically (indent=None writes it compact, for large sidecars)."""
    atomic_write(path, to_json(obj, indent, sort_keys))
    return Path(path)


def commit_dir(new: str | os.PathLike[str], out: str | os.PathLike[str]) -> None:
    """Rename the finished folder `new` to `out` (a store, a checkpoint, a bundle): an existing `out`
    is moved aside first, put back if the rename fails, and deleted after; the parent is fsync'd.
    A reader sees the old folder or the new one, never half of one."""
    import shutil

    new, out = Path(new), Path(out)
    old = temp_sibling(out) if out.exists() else None
    if old is not None:
        os.replace(out, old)
    try:
        os.replace(new, out)
    except BaseException:
        if old is not None:
            os.replace(old, out)
        raise
    fsync_dir(out.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def deliver(data: bytes, tmp_dir: str | os.PathLike[str], target: str | os.PathLike[str]) -> bool:
    """Maildir delivery: write `data` to tmp_dir, fsync it, then hard-link it to `target` (never over
    an existing file: False when `target` exists) and remove the tmp name; both folders fsync'd.
    A reader of the target's folder sees the whole file or none of it."""
    tmp_dir, target = Path(tmp_dir), Path(target)
    tmp = tmp_dir / f"{TMP_PREFIX}{os.getpid()}-{target.name}"
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, target)
        except FileExistsError:
            return False
        fsync_dir(target.parent)
        return True
    finally:
        tmp.unlink(missing_ok=True)
        fsync_dir(tmp_dir)
