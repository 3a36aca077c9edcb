"""The images of an image-text record: read from what the record holds, kept as encoded bytes.

A record's ``images`` entry is a list whose items are a file path (``str`` or ``os.PathLike``,
relative paths against ``root``), encoded bytes (PNG, JPEG...), a ``{"bytes": ..., "path": ...}``
dict (how an HF ``Image`` column is stored in Parquet) or a ``PIL.Image.Image``. Whatever the form,
the packed dataset keeps the encoded bytes (a PIL image is written as PNG), and the model's
processor turns them into pixels when a row is read.

    >>> import io
    >>> from PIL import Image
    >>> buf = io.BytesIO(); Image.new("RGB", (3, 2)).save(buf, format="PNG")
    >>> image_bytes(buf.getvalue(), example=0, k=0) == buf.getvalue()
    True
    >>> open_image(image_bytes(buf.getvalue(), example=0, k=0), example=0, k=0).size
    (3, 2)
    >>> image_bytes("missing.png", example=4, k=1)
    Traceback (most recent call last):
    ...
    seqpack.errors.UserError: example 4: image 1: no such file missing.png
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from seqpack.errors import UserError


def image_path(value: Any, root: str | os.PathLike[str] | None = None) -> Path | None:
    """The file an image reference names (a path, or a dict holding a path and no bytes), relative
    paths against ``root``; ``None`` for an image held in the record (bytes, a PIL image).

    >>> image_path({"bytes": None, "path": "a.png"}, "imgs").as_posix(), image_path(b"...")
    ('imgs/a.png', None)
    """
    if isinstance(value, Mapping) and value.get("bytes") is None:
        value = value.get("path")
    if not isinstance(value, (str, os.PathLike)):
        return None
    path = Path(value)
    return Path(root) / path if root is not None and not path.is_absolute() else path


def image_bytes(value: Any, *, example: int, k: int, root: str | os.PathLike[str] | None = None) -> bytes:
    """The encoded bytes of image ``k`` of record ``example`` (see the module for the forms taken)."""
    where = f"example {example}: image {k}"
    if isinstance(value, Mapping):
        if value.get("bytes") is not None:
            value = value["bytes"]
        elif value.get("path") is not None:
            value = value["path"]
        else:
            raise UserError(f"{where}: a dict with neither 'bytes' nor 'path'")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    path = image_path(value, root)
    if path is not None:
        if not path.is_file():
            raise UserError(f"{where}: no such file {path}")
        return path.read_bytes()
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - Pillow comes with the hf extra
        Image = None  # type: ignore[assignment]  # Pillow is optional: None when absent
    if Image is not None and isinstance(value, Image.Image):
        buf = io.BytesIO()
        value.save(buf, format="PNG")
        return buf.getvalue()
    raise UserError(
        f"{where}: is {type(value).__name__}; give a file path, encoded bytes, "
        "a {'bytes', 'path'} dict or a PIL image"
    )


def open_image(data: bytes, *, example: int, k: int) -> Any:
    """``data`` decoded as an RGB ``PIL.Image``; a ``ValueError`` naming the image if it is not one."""
    from PIL import Image, UnidentifiedImageError

    try:
        img = Image.open(io.BytesIO(data))
        img.load()
    except (UnidentifiedImageError, OSError, SyntaxError) as e:
        raise UserError(f"example {example}: image {k}: not a readable image ({type(e).__name__}: {e})") from e
    return img.convert("RGB")
