"""Reading a file without reading more than a limit: the bytes themselves, nothing of pdsl.

The lowest layer of reading input. :mod:`pdsl.diagnostics` quotes source lines through it (an excerpt never
reads a huge file or a device to its end) and :mod:`pdsl.limits` builds its located ``FileTooLarge`` error on
it; this module imports neither.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

__all__ = ["MAX_TEXT_BYTES", "MAX_DATA_BYTES", "MAX_INT_DIGITS", "read_at_most", "decode_text", "head", "size_text"]

MAX_TEXT_BYTES = 16 * 2**20  # a model, sampling, TOML or JSON file: text a person wrote or pdsl wrote
MAX_DATA_BYTES = 256 * 2**20  # a trajectory CSV (its rows become a list of strings first: ~5 times this in memory)
MAX_INT_DIGITS = sys.get_int_max_str_digits() or 4300  # Python's own limit of int(str)


def size_text(n: int) -> str:
    """``16 MiB``, ``256 MiB``, ``1.5 KiB``: a limit as a person reads it."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            v = n / scale
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{n} bytes"


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def head(raw: bytes) -> str:
    """The first line of a refused file, fit to be quoted: at most 80 characters, control characters shown as �."""
    line = raw[:320].split(b"\n", 1)[0].decode("utf-8", errors="replace")[:80]
    return _CONTROL.sub("\ufffd", line)


def read_at_most(path: str | Path, limit: int) -> tuple[bytes, int | None, bool]:
    """``(raw, size, regular)``: the bytes of ``path`` when there are at most ``limit`` of them (``limit + 1`` are
    read to tell), with ``size`` their number; else the first ones (enough for :func:`head`) with ``size`` the file's
    size, or None when a device or pipe gave more than ``limit``. ``regular``: a regular file. ``OSError`` (no
    such file, a directory, no permission) goes to the caller."""
    with open(Path(path), "rb") as fh:
        try:
            st = os.fstat(fh.fileno())
        except OSError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(21, "Is a directory", str(path))
        regular = st is not None and stat.S_ISREG(st.st_mode)
        if regular and st.st_size > limit:  # no need to read it to know
            return fh.read(400), st.st_size, regular
        raw = fh.read(limit + 1)
    return raw, (None if len(raw) > limit else len(raw)), regular


def decode_text(raw: bytes) -> str:
    """UTF-8 with universal newlines, as ``Path.read_text`` reads (``UnicodeDecodeError`` goes to the caller)."""
    text = raw.decode("utf-8")
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text
