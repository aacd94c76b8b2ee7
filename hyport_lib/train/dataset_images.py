"""A dataset's image files, bounded in size: a PNG of one colour at 20,000 × 20,000 pixels is a
few KB on disk and 1.2 GB decoded, so an image's decoded size is judged from its header before any
pixel is read (:data:`MAX_DECODED_IMAGE_BYTES`).
"""

from __future__ import annotations

import errno
import os
import warnings
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Optional

from hyport_lib.utils.bounded_files import FileTooLarge, UnreadableFile, open_regular

#: The most memory one image may take decoded, as PIL holds it and its RGB copy: 512 MiB,
#: e.g. a 48-megapixel photo (8,000 × 6,000 RGB: 2 × 4 bytes a pixel, 366 MiB) passes, a
#: 10,000 × 10,000 RGB image (763 MiB) does not, nor a 13,000 × 13,000 palette PNG (806 MiB).
#: Every model's processor resizes an image to far fewer pixels than this anyway.
MAX_DECODED_IMAGE_BYTES = 512 * 2**20
#: The largest image file opened: no image within the decoded bound needs more on disk.
MAX_IMAGE_FILE_BYTES = 256 * 2**20
#: The decoded RGB images :class:`DecodedImages` keeps, counted as PIL holds them (4 bytes
#: a pixel): at least one RGB image of the largest size allowed.
DECODED_CACHE_BYTES = 256 * 2**20
#: ``(kind, reason)`` of an image file that cannot be used.
Problem = tuple[str, str]


class UnreadableImage(ValueError):
    """An image of a record that cannot be used, found while tokenising."""

    def __init__(self, message: str, field: str, kind: str = "image_unreadable"):
        super().__init__(message)
        self.field = field
        self.kind = kind


@contextmanager
def _lazy_open(path):
    """``path`` opened by PIL (header read, no pixel decoded), bounded_files' way. PIL's
    own DecompressionBombWarning is silenced: the size is judged here, against a byte bound."""
    from PIL import Image

    with open_regular(path) as handle, warnings.catch_warnings():
        size = os.fstat(handle.fileno()).st_size
        if size > MAX_IMAGE_FILE_BYTES:
            raise FileTooLarge(path, f"the file is {size / 2**20:,.0f} MiB, larger than the "
                                     f"{MAX_IMAGE_FILE_BYTES // 2**20} MiB of any image hyport decodes", errno.EFBIG)
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        with Image.open(handle) as img:
            yield img


def _pixel_bytes(mode: str) -> int:
    """The bytes PIL holds one pixel of ``mode`` in: 4 for any mode of several bands (RGB
    too), else its one band's size."""
    from PIL import ImageMode

    try:
        described = ImageMode.getmode(mode)
    except KeyError:
        return 4
    return 4 if len(described.bands) > 1 else max(1, int(described.typestr[-1]))


def _held_size(img) -> int:
    return img.width * img.height * _pixel_bytes(img.mode)


def _too_large(img) -> Optional[str]:
    """Why ``img`` (its header read, no pixel) is too large to decode: its pixels in its own mode
    and their RGB copy."""
    size = _held_size(img) + img.width * img.height * _pixel_bytes("RGB")
    if size <= MAX_DECODED_IMAGE_BYTES:
        return None
    return (f"{img.width:,} × {img.height:,} pixels ({img.mode}) take {size / 2**20:,.0f} MiB decoded and as RGB, "
            f"more than the {MAX_DECODED_IMAGE_BYTES // 2**20} MiB hyport decodes for one image; "
            "resize it (the model's processor shrinks it anyway)")


def _opened(path, use: Callable, unreadable: Callable[[str], str] = str) -> tuple[Any, Optional[Problem]]:
    """``(use(img), None)`` for the image at ``path`` opened lazily, or ``(None, (kind, reason))``
    when it is too large (judged from its header) or unreadable (``unreadable`` words the reason
    of a file that opens but does not decode)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with _lazy_open(path) as img:
            why = _too_large(img)
            return (None, ("image_too_large", why)) if why else (use(img), None)
    except Image.DecompressionBombError as exc:  # PIL's own bound (pixels), met before the header is read out
        return None, ("image_too_large", f"{type(exc).__name__}: {str(exc)[:120]}")
    except FileTooLarge as exc:
        return None, ("image_too_large", exc.reason)
    except UnreadableFile as exc:
        return None, ("image_unreadable", exc.reason)
    except (OSError, UnidentifiedImageError, SyntaxError, ValueError) as exc:
        return None, ("image_unreadable", unreadable(f"{type(exc).__name__}: {str(exc)[:80]}"))


def image_problem(path: Path) -> Optional[Problem]:
    """``(kind, reason)`` when the image file cannot be used, else None: its size from its header,
    then its structure (PIL ``verify``) and its pixels (``load``: verify does not read a JPEG's
    image data)."""
    return _opened(path, lambda img: img.verify())[1] or _opened(path, lambda img: img.load())[1]


class DecodedImages:
    """RGB images by path, each decoded once while it stays among the most recently used
    (:data:`DECODED_CACHE_BYTES` in all)."""

    def __init__(self, budget: int = DECODED_CACHE_BYTES):
        self.budget = budget
        self.held = 0
        self._images: OrderedDict[str, object] = OrderedDict()
        self.decoded = 0  # a file decoded again after it left the cache counts again

    def rgb(self, path: str, record_index: int, field: str):
        """The image at ``path`` as RGB; :class:`UnreadableImage` names the record, field and file."""
        if path in self._images:
            self._images.move_to_end(path)
            return self._images[path]
        image = self._decode(path, record_index, field)
        size = _held_size(image)
        if size <= self.budget:
            self._images[path] = image
            self.held += size
            while self.held > self.budget:
                _, oldest = self._images.popitem(last=False)
                self.held -= _held_size(oldest)
        return image

    def _decode(self, path: str, record_index: int, field: str):
        def rgb(img):
            self.decoded += 1
            return img.convert("RGB")

        image, problem = _opened(path, rgb, lambda why: f"not a readable image ({why})")
        if problem is not None:
            kind, why = problem
            raise UnreadableImage(f"record {record_index}, {field}: image {path}: {why}", field, kind)
        return image
