"""Document readers: text files, JSON lines, Parquet, HF datasets.

Each reader is a generator of ``str`` documents with bounded memory.

    >>> list(from_hf_dataset([{"text": "one"}, {"text": "two"}]))
    ['one', 'two']
"""

from __future__ import annotations

import codecs
import os
import threading
from collections.abc import Iterable, Iterator

from seqpack.errors import UserError

# json and pathlib are imported where used: a training run needs only readable_file, and these
# (with typing) would slow its start-up
TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

DEFAULT_SEPARATOR = "<|endoftext|>"
#: invalid UTF-8 in a corpus: U+FFFD in its place, counted and reported (`replacement_line`); "strict" refuses it.
#: Real folders of text hold a few Latin-1 files: the default gets through them and says so.
DEFAULT_ERRORS = "replace"
_BLOCK = 1 << 20


def require_file(path: str | os.PathLike[str]) -> Path:
    """``path`` as a ``Path`` if it is a readable file, else a one-line ``OSError``; ``-`` is standard input."""
    from pathlib import Path

    return Path(readable_file(path))


def readable_file(path: str | os.PathLike[str]) -> str:
    """`require_file`, as a string (no pathlib).

    >>> readable_file("/nonexistent/x.txt")
    Traceback (most recent call last):
    ...
    FileNotFoundError: /nonexistent/x.txt: no such file
    """
    p = "/dev/stdin" if str(path) == "-" else os.fspath(path)
    if not os.path.exists(p):
        raise FileNotFoundError(f"{p}: no such file")
    if os.path.isdir(p):
        raise IsADirectoryError(f"{p}: is a directory, expected a file")
    if not os.access(p, os.R_OK):
        raise PermissionError(f"{p}: not readable")
    return p


TEXT_SUFFIXES = (".txt", ".text", ".md", ".rst")
INPUT_SUFFIXES = (*TEXT_SUFFIXES, ".jsonl", ".ndjson", ".parquet")


def expand_inputs(
    paths: Iterable[str | os.PathLike[str]], *, glob: str | None = None, suffixes: tuple[str, ...] = INPUT_SUFFIXES
) -> list[str]:
    """The input files that ``paths`` name: a file as it is, a directory as every file below it
    whose suffix is one of ``suffixes`` (default ``INPUT_SUFFIXES``; or, with ``glob``, whose name or path below the
    directory matches it: ``"*.py"``, ``"2024/*.jsonl"``), in sorted path order (hidden names
    skipped), so a folder of text and JSON-lines shards reads the same on any machine.

        >>> import pathlib, tempfile
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> for name in ("b.txt", "a.jsonl", "notes.pdf", ".hidden.txt", "sub/c.txt"):
        ...     (d / name).parent.mkdir(exist_ok=True)
        ...     _ = (d / name).write_text("x")
        >>> [pathlib.Path(p).relative_to(d).as_posix() for p in expand_inputs([d])]
        ['a.jsonl', 'b.txt', 'sub/c.txt']
        >>> [pathlib.Path(p).relative_to(d).as_posix() for p in expand_inputs([d], glob="*.txt")]
        ['b.txt', 'sub/c.txt']

    Args:
        paths: files and directories.
        glob: a pattern a directory's files must match (`None`: by `suffixes`).
        suffixes: the suffixes a directory's files must have, without `glob`.

    Returns:
        The files, as strings.

    Raises:
        FileNotFoundError: a path that does not exist, or a directory with no such file.
    """
    import fnmatch

    out: list[str] = []
    for path in paths:
        p = os.fspath(path)
        if not os.path.isdir(p):
            out.append(p)
            continue
        found = []
        for root, dirs, files in os.walk(p):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for f in files:
                rel = os.path.relpath(os.path.join(root, f), p).replace(os.sep, "/")
                wanted = (
                    fnmatch.fnmatch(f, glob) or fnmatch.fnmatch(rel, glob)
                    if glob
                    else os.path.splitext(f)[1].lower() in suffixes
                )
                if wanted and not f.startswith("."):
                    found.append(os.path.join(root, f))
        if not found:
            what = f"files matching --glob {glob!r}" if glob else f"{', '.join(suffixes)} files"
            hint = "" if glob else "; pass --glob '*' (glob='*') to read every file, or --glob '*.EXT' for one kind"
            raise FileNotFoundError(f"{p}: a directory with no input files in it (looked for {what}){hint}")
        out += sorted(found)
    return out


ERRORS_HINT = "pass --errors replace (errors='replace') to substitute U+FFFD"

_starts = threading.local()  # where the counting handler found invalid sequences in the current decode


def _count_replace(e: UnicodeError) -> tuple[str, int]:
    """``errors="replace"``, each replacement's offset noted: the same text as Python's own."""
    assert isinstance(e, UnicodeDecodeError), e  # registered for decoding only
    _starts.found.append(e.start)
    return "\ufffd", e.end


codecs.register_error("seqpack.replace", _count_replace)


class Replacements:
    """Invalid UTF-8 replaced by U+FFFD under ``errors="replace"``, counted per file (thread-safe):
    what `replacement_line` reports once a command has read its inputs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.files: dict[str, list[int]] = {}  # name -> [sequences replaced, first byte offset]

    def add(self, name: str, count: int, first: int) -> None:
        with self._lock:
            c = self.files.setdefault(name, [0, first])
            c[0] += count
            c[1] = min(c[1], first)

    def clear(self) -> None:
        with self._lock:
            self.files.clear()


#: what this process has replaced since a command last cleared it
REPLACED = Replacements()


def decode_replacing(data: bytes, *, name: str, offset: int = 0) -> str:
    """``data.decode("utf-8", errors="replace")``, each replacement counted in `REPLACED` under
    ``name`` (``offset``: where ``data`` starts in its file)."""
    _starts.found = []
    text = data.decode("utf-8", errors="seqpack.replace")
    if _starts.found:
        REPLACED.add(name, len(_starts.found), offset + _starts.found[0])
    return text


def replacement_line(replaced: Replacements = REPLACED) -> str | None:
    """One line for the user: how many invalid sequences were replaced, where, and how to refuse
    them instead (``None`` when nothing was)."""
    if not replaced.files:
        return None
    total = sum(c for c, _ in replaced.files.values())
    shown = "; ".join(f"{name}: {c:,} from byte {first:,}" for name, (c, first) in sorted(replaced.files.items())[:3])
    more = f"; {len(replaced.files) - 3} more file(s)" if len(replaced.files) > 3 else ""
    return (
        f"replaced {total:,} invalid UTF-8 sequence(s) with U+FFFD in {len(replaced.files):,} file(s) ({shown}{more}); "
        "pass --errors strict to refuse such files"
    )


def iter_decoded(
    path: str | os.PathLike[str] | None, *, errors: str = "strict", hint: str = ERRORS_HINT
) -> Iterator[str]:
    """Decode a file (``None``: standard input) as UTF-8 in blocks.

    Invalid UTF-8 with ``errors="strict"`` raises ``ValueError`` naming the file
    and the absolute byte offset. A byte-order mark at the start is not text: it is dropped.

    Args:
        path: the file, or `None` for standard input.
        errors: `strict` (invalid UTF-8 refused) or `replace` (U+FFFD in its place).
        hint: what an invalid byte should make the caller do.

    Yields:
        The text, a block at a time.

    Raises:
        UserError: invalid UTF-8 with `errors="strict"`.
    """
    import sys

    if path is not None and str(path) == "-":
        path = None  # "-": standard input, as every Unix tool reads it
    name = "<stdin>" if path is None else str(path)
    stream = sys.stdin.buffer if path is None else open(require_file(path), "rb")  # noqa: SIM115
    decoder = codecs.getincrementaldecoder("utf-8")(errors="seqpack.replace" if errors == "replace" else errors)
    consumed = 0
    first = True  # the first text decoded: where a byte-order mark would be
    try:
        while True:
            block = stream.read(_BLOCK)
            final = not block
            held = len(decoder.getstate()[0])
            _starts.found = []
            try:
                text = decoder.decode(block, final=final)
            except UnicodeDecodeError as e:
                raise UserError(f"{name}: invalid UTF-8 at byte offset {consumed - held + e.start}; {hint}") from e
            if _starts.found:
                REPLACED.add(name, len(_starts.found), consumed - held + _starts.found[0])
            consumed += len(block)
            if text and first:
                first = False
                text = text.removeprefix("\ufeff")
            if text:
                yield text
            if final:
                return
    finally:
        if path is not None:
            stream.close()


def read_text(
    path: str | os.PathLike[str],
    *,
    separator: str | None = DEFAULT_SEPARATOR,
    one_per_line: bool = False,
    errors: str = DEFAULT_ERRORS,
) -> Iterator[str]:
    """Documents of a text file: split at ``separator`` or, with ``one_per_line``, per line.

    ``separator=None`` and not ``one_per_line`` yields the whole file as one document.
    A trailing separator (or final newline) does not make an empty last document. Per line, a
    Windows line end (``\\r\\n``) is a line end, and a blank line is no document. Each block read is
    searched once (a long run without a separator is joined once, at its end: linear time).

        >>> import tempfile; p = tempfile.mktemp(); _ = open(p, "wb").write(b"a\\r\\n\\r\\nb\\r\\n")
        >>> list(read_text(p, one_per_line=True))
        ['a', 'b']

    Args:
        path: the text file.
        separator: what separates documents (`None`: the file is one document, unless `one_per_line`).
        one_per_line: each non-blank line is a document.
        errors: `replace` (the default: U+FFFD for invalid UTF-8, reported) or `strict`.

    Yields:
        Each document's text.

    Raises:
        UserError: invalid UTF-8 with `errors="strict"`, or an empty `separator`.
        FileNotFoundError: no such file.
    """
    sep = "\n" if one_per_line else separator
    if sep == "":
        raise UserError("separator must not be empty")
    k = 0 if sep is None else len(sep) - 1  # a separator may start in a block's last k characters
    pending: list[str] = []  # the current document so far, in pieces that hold no separator
    edge = ""  # the last k characters read, which may begin a separator

    def document(parts: list[str]) -> Iterator[str]:
        doc = "".join(parts)
        if one_per_line:
            doc = doc[:-1] if doc.endswith("\r") else doc
            if not doc:
                return
        yield doc

    for text in iter_decoded(path, errors=errors):
        if sep is None:
            pending.append(text)
            continue
        parts = (edge + text).split(sep)
        if len(parts) > 1:
            yield from document([*pending, parts[0]])
            for middle in parts[1:-1]:
                yield from document([middle])
            pending = []
        last = parts[-1]
        cut = max(0, len(last) - k)
        pending.append(last[:cut])
        edge = last[cut:]
    if any(pending) or edge:
        yield from document([*pending, edge])


def iter_json_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, Any]]:
    """``(line number, parsed value)`` of each non-blank line; one-line errors naming the file."""
    import json

    p = require_file(path)
    with open(p, encoding="utf-8-sig") as f:  # a byte-order mark at the start is not text
        try:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    yield lineno, json.loads(line)
                except json.JSONDecodeError as e:
                    raise UserError(f"{p}: line {lineno}: not valid JSON ({e.msg})") from e
        except UnicodeDecodeError as e:
            raise UserError(f"{p}: invalid UTF-8 ({e.reason})") from e


def read_jsonl(path: str | os.PathLike[str], *, text_field: str = "text") -> Iterator[str]:
    """The ``text_field`` of each JSON object per line (blank lines skipped).

    Args:
        path: the `.jsonl` file.
        text_field: the field holding each document's text.

    Yields:
        Each line's text.

    Raises:
        UserError: a line that is not a JSON object with a string `text_field`.
    """
    for lineno, obj in iter_json_lines(path):
        yield _field(obj, text_field, f"{path}: line {lineno}")


def _field(obj: Any, field: str, where: str) -> str:
    if not isinstance(obj, dict):
        raise UserError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if field not in obj:
        keys = ", ".join(sorted(map(str, obj))[:8])
        raise UserError(f"{where}: no field {field!r} (fields: {keys}); pass --text-field NAME")
    value = obj[field]
    if not isinstance(value, str):
        raise UserError(f"{where}: field {field!r} is {type(value).__name__}, expected a string")
    return value


def read_parquet(path: str | os.PathLike[str], *, text_field: str = "text") -> Iterator[str]:
    """The ``text_field`` column of a Parquet file, batch by batch.

    Args:
        path: the `.parquet` file.
        text_field: the column holding the text.

    Yields:
        Each row's text.

    Raises:
        UserError: not a readable Parquet file, no such column, or a value that is not a string.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = require_file(path)
    try:
        pf = pq.ParquetFile(p)
    except (pa.ArrowException, OSError) as e:  # pyarrow's own error types, and the file system's
        raise UserError(f"{p}: not a readable Parquet file ({e})") from e
    names = pf.schema_arrow.names
    if text_field not in names:
        raise UserError(f"{p}: no column {text_field!r} (columns: {', '.join(names)}); pass --text-field NAME")
    for batch in pf.iter_batches(columns=[text_field], batch_size=4096):
        for i, value in enumerate(batch.column(0).to_pylist()):
            if not isinstance(value, str):
                raise UserError(f"{p}: column {text_field!r} row {i} is {type(value).__name__}, expected a string")
            yield value


def from_hf_dataset(dataset: Iterable[Any], *, text_field: str = "text") -> Iterator[str]:
    """Documents of a Hugging Face ``datasets`` object (or any iterable of dicts).

    Args:
        dataset: a `datasets.Dataset`, or any iterable of dicts.
        text_field: the field holding each document's text.

    Yields:
        Each record's text.

    Raises:
        UserError: a record without `text_field`, or whose field is not a string.
    """
    for i, row in enumerate(dataset):
        yield _field(row, text_field, f"dataset row {i}")


def read_documents(
    paths: Iterable[str | os.PathLike[str]],
    *,
    text_field: str = "text",
    separator: str | None = DEFAULT_SEPARATOR,
    one_per_line: bool = False,
    errors: str = DEFAULT_ERRORS,
) -> Iterator[str]:
    """Documents of several files (a directory: its files, `expand_inputs`), chosen by suffix:
    ``.jsonl``, ``.parquet``, else text.

    Args:
        paths: files and directories.
        text_field: the field holding the text, in `.jsonl` and `.parquet` files.
        separator: what separates documents in a text file (`None`: a file is one document).
        one_per_line: a text file's lines are its documents.
        errors: `replace` (the default: U+FFFD for invalid UTF-8, reported) or `strict`.

    Yields:
        Each document's text, file by file.

    Raises:
        UserError: invalid UTF-8 with `errors="strict"`, or a record without a string `text_field`.
        FileNotFoundError: a path that does not exist.
    """
    for path in expand_inputs(paths):
        suffix = _suffix(path)
        if suffix in (".jsonl", ".ndjson"):
            yield from read_jsonl(path, text_field=text_field)
        elif suffix == ".parquet":
            yield from read_parquet(path, text_field=text_field)
        else:
            yield from read_text(path, separator=separator, one_per_line=one_per_line, errors=errors)


def is_structured(path: str | os.PathLike[str]) -> bool:
    """True for formats whose documents come from a field (jsonl, parquet)."""
    return _suffix(path) in (".jsonl", ".ndjson", ".parquet")


def _suffix(path: str | os.PathLike[str]) -> str:
    from pathlib import Path

    return Path(path).suffix.lower()
