"""What CasADi, SUNDIALS, IPOPT and the rootfinders print, kept off the terminal and summarised once.

The numerical libraries under pdsl print in two ways:

* through Python's ``sys.stdout``/``sys.stderr``: CasADi's Python bindings route its own warnings
  (``CasADi - ... WARNING("F:daeF failed: Inf detected ...")``) and the messages of SUNDIALS' error handler
  (``At t = 1, mxstep steps taken before reaching tout.``, ``... t + h = t on the next step``) there;
* with C's stdio straight to the file descriptors 1 and 2 (IPOPT, the dump of a failed rootfinder's inputs).

A finite-time blow-up made CVODES print ~750,000 such lines over ~17 s before pdsl's located error. Every call
into these libraries therefore runs inside :func:`capture` (pdsl.sim.simulate, pdsl.fit.loss, pdsl.fit.ipopt,
pdsl.fit.torch_bridge): for the duration of the call

* fds 1 and 2 point at one unlinked temporary file (append mode); after the call C's buffers are flushed, the
  file is read back in chunks into an :class:`Output` (a line count and the first and last few KB: bounded
  memory, whatever was printed) and truncated;
* ``sys.stdout``/``sys.stderr`` are proxies: a write that comes from CasADi (its Python frame is in the
  ``casadi`` package, or the write has no Python frame: a CasADi worker thread) goes into the same
  :class:`Output`; any other write — pdsl's own, a progress bar's — goes to the real stream, whose fd is
  reached through a saved duplicate. Python's buffers are flushed before the fds move and after they come back.

:func:`released` undoes the capture for Python code that runs *inside* a captured call and prints (IPOPT's
iteration callback updates the progress bar through a stream created before the call).

What was suppressed is added to a process-wide tally; the CLI prints it once, after the result or the located
error: :func:`take_note` (``note: the numerical solvers printed 751,203 lines (suppressed; -vv shows them);
first: '...'``). ``pdsl -vv`` (:func:`set_passthrough`) lets everything through and still records the Python-routed
text, so that pdsl's reading of the solver's messages (``At t = ...``) is the same either way.

Only the standard library is imported here: the module is imported on every simulate.
"""

from __future__ import annotations

import io
import os
import sys
import threading

__all__ = ["Output", "capture", "released", "set_passthrough", "take_note", "note", "total"]

HEAD_CHARS = 4096  # the first and last this many characters of what was printed are kept
TAIL_CHARS = 4096
_CHUNK = 1 << 20  # the temporary file is read back in chunks of this size


class Output:
    """What solvers printed during one or more captured calls: a line count, the head and the tail."""

    __slots__ = ("chars", "newlines", "head", "tail", "_open_line")

    def __init__(self) -> None:
        self.chars = 0
        self.newlines = 0
        self.head = ""
        self.tail = ""
        self._open_line = False  # the last text did not end with a newline

    def feed(self, text: str) -> None:
        if not text:
            return
        self.chars += len(text)
        self.newlines += text.count("\n")
        self._open_line = not text.endswith("\n")
        if len(self.head) < HEAD_CHARS:
            self.head += text[: HEAD_CHARS - len(self.head)]
        self.tail = (self.tail + text[-TAIL_CHARS:])[-TAIL_CHARS:]

    @property
    def lines(self) -> int:
        """Lines printed (a last line without its newline counts)."""
        return self.newlines + (1 if self._open_line else 0)

    @property
    def complete(self) -> bool:
        """Everything printed is in ``head`` (and in ``tail``)."""
        return self.chars <= HEAD_CHARS

    def text(self) -> str:
        """The head, and the tail when it is not the same text (``...`` between them)."""
        if self.complete:
            return self.head
        return self.head + "\n...\n" + self.tail

    def first_line(self) -> str:
        return next((ln.strip() for ln in self.head.splitlines() if ln.strip()), "")

    def last_line(self) -> str:
        return next((ln.strip() for ln in reversed(self.tail.splitlines()) if ln.strip()), "")

    def __bool__(self) -> bool:
        return self.chars > 0


# ---------------------------------------------------------------------------------------------- process state
_lock = threading.RLock()
_feed_lock = threading.Lock()
_passthrough = False
_depth = 0  # captured calls in progress (all threads)
_active: list[Output] = []  # their outputs, in the order entered: what is printed goes into the last
_tally_flags: list[bool] = []  # parallel to _active: does this call count in the process-wide tally
_file_fd: int | None = None  # the unlinked temporary file fds 1 and 2 point at while captured
_saved: dict[int, int] = {}  # fd -> a duplicate of the real one, while captured
_streams: tuple | None = None  # (sys.stdout, sys.stderr) replaced by proxies
_libc = None
_TOTAL = Output()  # everything suppressed since the last take_note()


def set_passthrough(on: bool) -> None:
    """``pdsl -vv``: let the solvers print (captured calls still record the Python-routed text)."""
    global _passthrough
    _passthrough = bool(on)


def total() -> Output:
    """Everything suppressed since the last :func:`take_note` (all captured calls that count)."""
    return _TOTAL


def note(out: Output, who: str = "the numerical solvers") -> str:
    """``note: ... printed N lines (suppressed; -vv shows them); first: '...'; last: '...'``."""
    n = out.lines
    first, last = out.first_line(), out.last_line()
    text = f"note: {who} printed {n:,} line{'s' if n != 1 else ''} (suppressed; pass -vv to see them)"
    if first:
        text += f"; first: {_clip(first)!r}"
    if last and (n > 1 and last != first or not out.complete):
        text += f"; last: {_clip(last)!r}"
    return text


def take_note() -> str | None:
    """The note on what was suppressed since the last call (None when nothing was); the tally restarts."""
    global _TOTAL
    with _feed_lock:
        out, _TOTAL = _TOTAL, Output()
    return note(out) if out else None


def _clip(line: str, width: int = 160) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


class capture:
    """``with capture() as out:`` around a call into CasADi: what it prints goes into ``out`` (an
    :class:`Output`), not to the terminal. ``tally=False``: not counted in the note the CLI prints (a probe
    whose failure is expected). Nests — what a nested call prints is the nested call's only — and may be entered
    from several threads at once: the fds move when the first call starts and come back when the last one ends."""

    __slots__ = ("output", "tally")

    def __init__(self, tally: bool = True) -> None:
        self.output = Output()
        self.tally = tally

    def __enter__(self) -> Output:
        global _depth
        with _lock:
            if _depth == 0:
                _apply()
            else:
                _drain()  # what the calls in progress printed so far is theirs, not this one's
            _depth += 1
            with _feed_lock:
                _active.append(self.output)
                _tally_flags.append(self.tally)
        return self.output

    def __exit__(self, *exc) -> bool:
        global _depth
        with _lock:
            _drain()
            with _feed_lock:
                k = next(i for i, o in enumerate(_active) if o is self.output)
                del _active[k], _tally_flags[k]
            _depth -= 1
            if _depth == 0:
                _unapply()
        return False


class released:
    """Inside a captured call: pdsl's own Python code that prints (an iteration callback) runs with the real
    fds and streams; the capture resumes afterwards. Nothing happens outside a captured call."""

    __slots__ = ("_was",)

    def __enter__(self) -> None:
        with _lock:
            self._was = _depth > 0 and _streams is not None
            if self._was:
                _drain()
                _unapply()

    def __exit__(self, *exc) -> bool:
        with _lock:
            if self._was:
                _apply()
        return False


# ---------------------------------------------------------------------------------------------- the mechanics
def _flush_python() -> None:
    for s in (sys.stdout, sys.stderr):
        try:
            if s is not None:
                s.flush()
        except (OSError, ValueError, AttributeError):  # a closed or broken stream: nothing to keep
            pass


def _flush_c() -> None:
    global _libc
    if _libc is None:
        try:
            import ctypes

            _libc = ctypes.CDLL(None)
            _libc.fflush  # noqa: B018 - present?
        except (OSError, AttributeError):
            _libc = False
    if _libc:
        _libc.fflush(None)


def _temp_file() -> int | None:
    global _file_fd
    if _file_fd is None:
        import tempfile

        try:
            fd, path = tempfile.mkstemp(prefix="pdsl-solver-output-")
            try:
                _file_fd = os.open(path, os.O_RDWR | os.O_APPEND)
            finally:
                os.close(fd)
                os.unlink(path)
        except OSError:  # no writable temporary directory: the Python-routed text is still captured
            _file_fd = -1
    return _file_fd if _file_fd >= 0 else None


def _apply() -> None:
    """Point fds 1 and 2 at the temporary file and the Python streams at proxies (under _lock)."""
    global _streams
    _flush_python()
    if not _passthrough:
        _flush_c()
        target = _temp_file()
        if target is not None:
            for fd in (1, 2):
                try:
                    _saved[fd] = os.dup(fd)
                except OSError:  # not open (a daemon): nothing to capture there
                    continue
                os.dup2(target, fd)
    out, err = sys.stdout, sys.stderr
    _streams = (out, err)
    sys.stdout, sys.stderr = _Proxy(out), _Proxy(err)


def _unapply() -> None:
    """Undo :func:`_apply` (under _lock)."""
    global _streams
    if _saved:
        _flush_c()
    if _streams is not None:
        for name, original in zip(("stdout", "stderr"), _streams):
            current = getattr(sys, name)
            if isinstance(current, _Proxy):
                current.close_passthrough()
                setattr(sys, name, original)
        _streams = None
    for fd, dup in list(_saved.items()):
        os.dup2(dup, fd)
        os.close(dup)
    _saved.clear()


def _drain() -> None:
    """Move what the fds received into the active outputs and empty the file (under _lock)."""
    if not _saved or _file_fd is None or _file_fd < 0:
        return
    _flush_c()
    size = os.fstat(_file_fd).st_size
    if not size:
        return
    offset = 0
    while offset < size:
        chunk = os.pread(_file_fd, min(_CHUNK, size - offset), offset)
        if not chunk:
            break
        offset += len(chunk)
        _feed(chunk.decode("utf-8", "replace"))
    os.ftruncate(_file_fd, 0)


def _feed(text: str) -> None:
    """What was printed belongs to the innermost captured call (the last one entered): a probe nested in a run
    keeps its expected messages to itself (and out of the tally when it asked so)."""
    with _feed_lock:
        if not _active:
            return
        _active[-1].feed(text)
        if not _passthrough and _tally_flags[-1]:
            _TOTAL.feed(text)


def _from_casadi() -> bool:
    """Is the current write CasADi's (called from its Python module, or from a thread with no Python frame)?"""
    try:
        frame = sys._getframe(2)  # 0: this function, 1: _Proxy.write, 2: the caller of write
    except ValueError:
        return True
    name = frame.f_globals.get("__name__", "") or ""
    return name == "casadi" or name.startswith("casadi.")


class _Proxy:
    """``sys.stdout``/``sys.stderr`` during a captured call: CasADi's writes are captured, others go through."""

    def __init__(self, original) -> None:
        self._original = original
        self._through = None  # a text stream on the saved duplicate of the real fd, made when first needed

    def write(self, text) -> int:
        if _from_casadi():
            _feed(str(text))
            if not _passthrough:
                return len(text)
        return self._passthrough_stream().write(text)

    def _passthrough_stream(self):
        original = self._original
        if self._through is not None:
            return self._through
        try:
            fd = original.fileno()
        except (AttributeError, OSError, ValueError):  # StringIO, pytest's capsys: not behind the fds
            return original
        if fd not in _saved:
            return original
        self._through = io.TextIOWrapper(io.FileIO(_saved[fd], "w", closefd=False),
                                         encoding=getattr(original, "encoding", None) or "utf-8",
                                         errors=getattr(original, "errors", None) or "strict",
                                         line_buffering=True, write_through=True)
        return self._through

    def flush(self) -> None:
        if self._through is not None:
            self._through.flush()
        try:
            self._original.flush()
        except (OSError, ValueError):
            pass

    def close_passthrough(self) -> None:
        if self._through is not None:
            try:
                self._through.flush()
            except (OSError, ValueError):
                pass
            self._through = None

    def __getattr__(self, name):  # isatty, encoding, fileno, buffer, ... of the real stream
        return getattr(self._original, name)
