"""What pdsl may write to a stream besides plain lines: colours and progress bars (standard library only).

* Colour (the ``error[Code]`` of a diagnostic): only on a terminal, and never when the environment variable
  ``NO_COLOR`` is set to anything but the empty string (https://no-color.org).
* Progress bars (tqdm, redrawn in place with carriage returns): only on a terminal or in a Jupyter kernel,
  whose front end redraws them too. A log file, a pipe or CI gets no bar, so no carriage-return frames; the
  commands' summaries say what was done. ``pdsl -q`` and ``pdsl fit --quiet`` turn bars off on a terminal too.
"""

from __future__ import annotations

import os
import sys

__all__ = ["color", "progress"]


def _tty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


def color(stream=None) -> bool:
    """Whether to colour what goes to ``stream`` (standard error by default)."""
    if os.environ.get("NO_COLOR", ""):
        return False
    return _tty(sys.stderr if stream is None else stream)


def progress(stream=None) -> bool:
    """Whether a progress bar may be drawn on ``stream`` (standard error by default)."""
    stream = sys.stderr if stream is None else stream
    if _tty(stream):
        return True
    return type(stream).__module__.split(".")[0] == "ipykernel"  # a notebook's output area redraws a bar
