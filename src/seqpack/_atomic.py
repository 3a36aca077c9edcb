"""Atomic output, the one helper every writer uses: write into a temp dir (or file) beside the
target, then rename.

    with atomic_directory("out", kind=OutputKind("packed dataset", ("manifest.json", "kind", "seqpack.packed_dataset"))) as tmp:
        (tmp / "data.bin").write_bytes(...)
        (tmp / "meta.json").write_text(...)   # manifest last
    # "out" now exists, complete, or not at all

    with atomic_file("run/checkpoint.pt") as tmp:  # a single file, replaced in one rename
        torch.save(state, tmp)
    write_text_atomic("out/stages.json", text)
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from seqpack.errors import UserError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a cost in every start-up)
if TYPE_CHECKING:
    from typing import Any


def check_not_input(
    path: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str] | None], *, flag: str = "--out"
) -> None:
    """Refuse an output that is, contains or lies inside one of ``inputs``, or holds the working
    directory (links resolved): writing it would change or delete what the command reads.

    >>> check_not_input("data/packed", ["data/store"])
    >>> check_not_input("data/store", ["data/store/shard-00000"])
    Traceback (most recent call last):
    ...
    seqpack.errors.UserError: --out data/store contains the input data/store/shard-00000; pick an output outside every input
    """
    out = Path(os.path.realpath(path))
    for item in inputs:
        if item is None or str(item) in ("", "-"):
            continue
        inp = Path(os.path.realpath(item))
        if out == inp:
            what = "is"
        elif out in inp.parents:
            what = "contains"
        elif inp in out.parents:
            what = "lies inside"
        else:
            continue
        raise UserError(f"{flag} {path} {what} the input {item}; pick an output outside every input")
    cwd = Path(os.path.realpath(os.getcwd()))
    if out == cwd or out in cwd.parents:
        raise UserError(f"{flag} {path} holds the working directory; pick an output directory beside it")


def check_path(out: str | os.PathLike[str], *, flag: str = "--out") -> None:
    """Refuse an output that is a symbolic link (dangling, to another filesystem, or not: the output
    is put in place by a rename, which would replace the link, or fail only at the end), or whose
    path runs through a loop of links, before any work.

    >>> import tempfile; d = Path(tempfile.mkdtemp()); (d / "out").symlink_to(d / "elsewhere")
    >>> check_path(d / "out")
    Traceback (most recent call last):
    ...
    seqpack.errors.UserError: --out ... is a symbolic link (to ...elsewhere); give the directory itself (or a new path): the output is put in place by a rename, which would replace the link
    """
    p = Path(out)
    if p.is_symlink():
        raise UserError(
            f"{flag} {out} is a symbolic link (to {os.readlink(p)}); give the directory itself (or a new "
            "path): the output is put in place by a rename, which would replace the link"
        )
    try:
        p.resolve()
    except (RuntimeError, OSError) as e:  # RuntimeError before Python 3.13, OSError (ELOOP) after
        raise UserError(
            f"{flag} {out}: its path runs through a loop of symbolic links ({e}); pick another output"
        ) from e


def check_writable(out: Path, *, flag: str = "--out") -> None:
    """Refuse an output whose directory cannot be written (read-only, or not ours), or that
    `check_path` refuses, before any work."""
    check_path(out, flag=flag)
    anc = Path(os.path.realpath(out)).parent
    while not anc.exists():
        anc = anc.parent
    if not anc.is_dir() or not os.access(anc, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {out}: cannot write in {anc} (read-only or not permitted); pick another output")


class OutputKind:
    """What a seqpack output directory is, told by its own files: ``--overwrite`` replaces a
    directory only when it is empty or one of these (`check_output_dir`).

    ``markers``: ``(file, key, value)`` triples, any of which tells one (``manifest.json`` whose
    ``kind`` is ``seqpack.packed_dataset``); ``inside``: a file whose presence in the parent
    directory tells one (a stage's output inside a job's own work directory).

    >>> import tempfile; d = Path(tempfile.mkdtemp())
    >>> PACKED = OutputKind("packed dataset", ("manifest.json", "kind", "seqpack.packed_dataset"))
    >>> PACKED.made(d)
    False
    >>> _ = (d / "manifest.json").write_text('{"kind": "seqpack.packed_dataset"}')
    >>> PACKED.made(d)
    True
    """

    __slots__ = ("inside", "markers", "what")

    def __init__(self, what: str, *markers: tuple[str, str, str], inside: str | None = None) -> None:
        self.what, self.markers, self.inside = what, markers, inside

    def made(self, directory: Path) -> bool:
        """Whether ``directory`` is one of these, as its own files say."""
        if self.inside is not None and (directory.parent / self.inside).is_file():
            return True
        return any(_json_object(directory / name).get(key) == value for name, key, value in self.markers)

    def __repr__(self) -> str:
        return f"OutputKind({self.what!r})"


#: the files whose ``kind`` (or ``format``) names what a seqpack directory is, for the line that
#: refuses one of another kind
MARKER_FILES = ("manifest.json", "meta.json", "shards.json", "config.json", ".seqpack-demo.json")
#: a marker file read to tell a directory's kind is at most this large (a manifest lists its parts)
_MARKER_BYTES = 256 * 2**20


def _json_object(path: Path) -> dict[str, Any]:
    """``path``'s JSON object, or ``{}`` (no such file, too large, not a JSON object)."""
    try:
        if not path.is_file() or path.stat().st_size > _MARKER_BYTES:
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _said_kind(data: dict[str, Any]) -> str | None:
    """The seqpack kind a JSON object says it is (its ``kind`` or ``format``), or None."""
    said = [v for v in (data.get("kind"), data.get("format")) if isinstance(v, str) and v.startswith("seqpack")]
    return said[0] if said else None


def seqpack_kind(directory: Path) -> str | None:
    """The kind a seqpack directory says it is (``seqpack.token_store``), or None."""
    return next((k for name in MARKER_FILES if (k := _said_kind(_json_object(directory / name)))), None)


def check_output_dir(
    path: str | os.PathLike[str],
    *,
    overwrite: bool,
    kind: OutputKind,
    inputs: Iterable[str | os.PathLike[str] | None] = (),
    flag: str = "--out",
) -> Path:
    """The one rule over a directory a command writes: refuse it if `check_not_input` does
    (``inputs``: what the command reads); a new or empty directory is written; an existing
    ``kind`` (its own files say so) is replaced only with ``overwrite``; anything else (a home
    directory, the working directory's parent, a folder of the user's files, a seqpack directory
    of another kind) is refused whatever ``overwrite`` says: nothing seqpack did not make is
    ever deleted.

    >>> import tempfile; home = Path(tempfile.mkdtemp()); _ = (home / ".bashrc").write_text("x")
    >>> check_output_dir(home, overwrite=True, kind=OutputKind("packed dataset"))
    Traceback (most recent call last):
    ...
    FileExistsError: --out ...: holds files seqpack did not make (.bashrc); --overwrite replaces only an empty directory or a packed dataset: pick another --out
    """
    check_not_input(path, inputs, flag=flag)
    out = Path(path)
    check_writable(out, flag=flag)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{flag} {out}: exists and is not a directory; pick another {flag}")
    if not out.is_dir():
        return out
    entries = sorted(os.listdir(out))
    if not entries:
        return out
    if kind.made(out):
        if not overwrite:
            raise FileExistsError(f"{out}: holds a {kind.what}; pass --overwrite to replace it")
        return out
    raise FileExistsError(foreign_directory(out, entries, kind, flag=flag))


def foreign_directory(out: Path, entries: list[str], kind: OutputKind, *, flag: str = "--out") -> str:
    """The line that refuses to replace ``out``, a non-empty directory that is not a ``kind``."""
    other = seqpack_kind(out)
    if other is not None:
        return f"{flag} {out}: holds a {other}, not a {kind.what}; pick another {flag}"
    shown = ", ".join(entries[:3]) + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")
    return (
        f"{flag} {out}: holds files seqpack did not make ({shown}); --overwrite replaces only an empty "
        f"directory or a {kind.what}: pick another {flag}"
    )


#: what an output file that ``--overwrite`` may replace starts with, by the format its flag writes
#: (`check_outputs`); a JSON file must also say it is seqpack's (its ``kind`` or ``format``)
FILE_FORMATS = {"json": b"{", "png": b"\x89PNG\r\n\x1a\n"}


def made_file(path: Path, fmt: str) -> bool:
    """Whether ``path`` is a file seqpack wrote in format ``fmt`` (`FILE_FORMATS`): so that
    ``--overwrite`` replaces an earlier plan or plot, never a user's ``.bashrc``."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(FILE_FORMATS[fmt]))
    except OSError:
        return False
    if head != FILE_FORMATS[fmt]:
        return False
    return fmt != "json" or _said_kind(_json_object(path)) is not None


def check_outputs(
    outputs: Mapping[str, tuple[str | os.PathLike[str] | None, str | None]],
    inputs: Iterable[str | os.PathLike[str] | None],
    *,
    overwrite: bool,
) -> None:
    """The one guard over a command's outputs, before any work: ``outputs`` maps a flag to (its path
    or None, the format of the file it names, or None for a directory). No output is, holds or lies
    inside an input or another output; each is writable; a file that exists is replaced only with
    ``overwrite``, and only if it is a file of that format seqpack wrote (`made_file`); a directory's
    own rules (`check_output_dir`, a run's resume) stay with the command.

    >>> check_outputs({"--out": ("h.npy", "json")}, ["h.npy"], overwrite=True)
    Traceback (most recent call last):
    ...
    seqpack.errors.UserError: --out h.npy is the input h.npy; pick an output outside every input
    """
    given = [(flag, path, fmt) for flag, (path, fmt) in outputs.items() if path not in (None, "", "-")]
    inputs = list(inputs)
    for i, (flag, path, fmt) in enumerate(given):
        assert path is not None
        check_not_input(path, inputs, flag=flag)
        for other, other_path, _ in given[:i]:
            if os.path.realpath(path) == os.path.realpath(other_path):
                raise UserError(f"{flag} {path} is also {other}; give each output its own path")
        out = Path(path)
        check_writable(out, flag=flag)
        if fmt is None:
            continue
        if out.is_dir():
            raise UserError(f"{flag} {path}: is a directory; {flag} names a file")
        if out.exists() and not overwrite:
            raise UserError(f"{flag} {path}: exists; pass --overwrite to replace it")
        if out.exists() and not made_file(out, fmt):
            raise UserError(
                f"{flag} {path}: exists and is not a {fmt.upper()} file seqpack wrote; --overwrite replaces only "
                f"those: pick another {flag}"
            )


def _umask() -> int:
    mask = os.umask(0)  # reading the umask sets it: put it back at once (at import, before any thread)
    os.umask(mask)
    return mask


#: mode of written files, as open() would give them (mkstemp makes them 0600)
FILE_MODE = 0o666 & ~_umask()


def remove_leftovers(directory: Path, pattern: str) -> None:
    """Remove what a killed write left in ``directory`` (``pattern``: the names seqpack gives its temp
    files and directories, such as ``.NAME.tmp-*``), once no live job can own them."""
    for stale in directory.glob(pattern):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)


_HELD: dict[str, tuple[int, int]] = {}  # lock path -> (fd, depth): a job may nest its own writes


@contextmanager
def output_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the lock on writing ``path`` (``.NAME.lock`` beside it); a second job refuses at once.

    Re-entrant within a process. Leftovers of a killed job (``.NAME.tmp-*``, ``.NAME.old-*``)
    are removed once the lock is held, since no live job can own them then.
    """
    out = Path(path)
    check_path(out)
    parent = out.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    lock = str(parent / f".{out.name}.lock")
    if lock in _HELD:
        fd, depth = _HELD[lock]
        _HELD[lock] = (fd, depth + 1)
        try:
            yield
        finally:
            fd, depth = _HELD[lock]
            _HELD[lock] = (fd, depth - 1)
        return
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:  # say what the user asked for, not the lock file's name
            raise OSError(f"{out}: cannot write in {parent} ({e.strerror})") from e
        if not _try_lock(fd):
            os.close(fd)
            raise FileExistsError(
                f"{out}: another seqpack job is writing it now (lock {lock}); wait for it or pick another output"
            ) from None
        try:  # the lock file is removed on release: make sure we locked the one on disk
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    _HELD[lock] = (fd, 1)
    try:
        for pattern in (f".{out.name}.tmp-*", f".{out.name}.old-*"):
            remove_leftovers(parent, pattern)
        yield
    finally:
        del _HELD[lock]
        _release(fd, lock)


def _try_lock(fd: int) -> bool:
    """Take the exclusive lock on the open lock file ``fd`` without waiting (False: another job
    holds it): ``flock`` on POSIX, ``msvcrt.locking`` of its first byte on Windows."""
    if sys.platform == "win32":  # pragma: no cover - Windows wheels
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _release(fd: int, lock: str) -> None:
    """Remove the lock file, then let go of it (POSIX: removed while held, so no other job locks a
    file on its way out; Windows cannot remove an open file: let go, close, then remove it)."""
    if sys.platform == "win32":  # pragma: no cover - Windows wheels
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        os.close(fd)
        with contextlib.suppress(OSError):  # another job has it open already: it removes it in turn
            os.unlink(lock)
        return
    import fcntl

    os.unlink(lock)
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


@contextmanager
def atomic_directory(path: str | os.PathLike[str], *, kind: OutputKind, overwrite: bool = False) -> Iterator[Path]:
    """Yield a fresh temp dir; on success it replaces ``path`` in one rename (under `output_lock`).
    ``path`` must be new, empty, or (with ``overwrite``) a ``kind`` (`check_output_dir`)."""
    with output_lock(path), _atomic_directory(path, kind=kind, overwrite=overwrite) as tmp:
        yield tmp


@contextmanager
def _atomic_directory(path: str | os.PathLike[str], *, kind: OutputKind, overwrite: bool) -> Iterator[Path]:
    out = check_output_dir(path, overwrite=overwrite, kind=kind)
    parent = out.resolve().parent
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=parent))
    try:
        with _naming(out):
            yield tmp
            replace_directory(tmp, out, kind=kind)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextmanager
def _naming(out: Path) -> Iterator[None]:
    """A failed write (a full disk: "2951418 requested and 716736 written") names what was being written."""
    try:
        yield
    except OSError as e:
        if str(out) in str(e):
            raise
        hint = "; free space on its disk and run again" if e.errno in (None, errno.ENOSPC, errno.EDQUOT) else ""
        raise OSError(f"{out}: writing failed ({e.strerror or e}){hint}") from e


def replace_directory(src: Path, out: Path, *, kind: OutputKind) -> None:
    """Put the finished directory ``src`` at ``out`` in one rename, replacing ``out`` only if it is
    empty or a ``kind`` (checked again here, at the last moment: nothing else is ever deleted)."""
    parent = out.resolve().parent
    os.chmod(src, 0o755)
    if out.is_dir() and not out.is_symlink():
        entries = sorted(os.listdir(out))
        if entries and not kind.made(out):
            raise FileExistsError(foreign_directory(out, entries, kind))
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=parent))
        os.rename(out, old / "x")
        os.rename(src, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(src, out)


@contextmanager
def atomic_file(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temp path beside ``path``; on success it replaces ``path`` in one rename, on
    failure it is removed (a reader never sees a half-written file)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{out.name}.tmp-", dir=out.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        with _naming(out):
            yield tmp
            os.chmod(tmp, FILE_MODE)
            os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    with atomic_file(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


#: what a seqpack directory of another kind is, for the line that refuses it where one kind is expected
KINDS = {
    "seqpack-vision-packs": "it holds image-text rows in the format seqpack wrote before they became packed "
    "datasets with an example table; pack the records again with seqpack pack --task vision"
}


def read_versioned_json(
    directory: Path, name: str, *, kind: str, version: int | tuple[int, ...], what: str, hint: str
) -> dict[str, Any]:
    """``directory/name`` as a dict whose ``kind`` and ``format_version`` match (``version``: the one
    read, or those read); one-line errors.

    ``what`` names the thing ("token store"); ``hint`` says how to make one.
    """
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no such {what} directory ({hint})")
    path = directory / name
    if not path.is_file():
        raise UserError(f"{path}: missing; {directory} is not a complete {what}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: corrupt ({e})") from e
    if not isinstance(data, dict) or data.get("kind") != kind:
        other = data.get("kind") if isinstance(data, dict) else None
        said = (
            f" ({KINDS.get(other, f'its kind is {other!r}')})"
            if isinstance(other, str) and other.startswith("seqpack")
            else ""
        )
        raise UserError(f"{path}: not a seqpack {what}{said}")
    versions = version if isinstance(version, tuple) else (version,)
    if data.get("format_version") not in versions:
        reads = " or ".join(map(str, versions))
        raise UserError(f"{path}: format version {data.get('format_version')}, this seqpack reads {reads}")
    return data
