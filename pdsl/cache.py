"""An on-disk cache of compiled models: the second run of an unchanged model skips parse, sympy and lowering.

:func:`pdsl.pipeline.compile_model` asks the active :class:`ModelCache` (the CLI turns one on; the library
only when given one) before it parses. An entry is keyed by

* the model file's path and text, and the working directory when the path is relative (spans name the file);
* the frozen :class:`~pdsl.pipeline.CompileOptions` (model, consts, formulation, stabilisation, seed);
* the pdsl, CasADi and Python versions, :data:`FORMAT` and a stamp of pdsl's own source files (an editable
  install whose code changed does not read entries its old code wrote);

and holds the texts' hashes of every file the compilation read (imports, the ``std:`` library): an entry
whose imports changed is a miss (a manifest, as ``ccache`` keeps one). The entry is one pickle:

* the :class:`~pdsl.backend.functions.NumericSystem` with its CasADi Functions (serialised by CasADi,
  exact: a cached run gives bit-identical numbers);
* the resolved model and the symbolic system as *lazy* objects (:class:`Deferred`): their cheap facts
  (name, span, units, stabilisation) are read directly, anything else unpickles the sympy objects on
  first use. ``pdsl simulate`` of a cached model therefore never imports sympy, lark or the lowering.

Writes are atomic (a temporary file in the cache directory, then ``os.replace``), so concurrent runs
never see half an entry. The directory is bounded (:data:`DEFAULT_MAX_BYTES`, ``PDSL_CACHE_MAX_MB``): the
least recently used entries go first; temporaries count too.

**Trust.** An entry is a pickle, a compiled right-hand side (``rhs-<sha256>.so``, :mod:`pdsl.sim.compiled`)
a shared object: loading either runs code. The cache trusts only what this user's pdsl wrote:

* the directory must be owned by the user and not writable by group or others; its ancestors must not be
  writable by others unless sticky (``/tmp``), nor owned by another user (root aside). A directory that fails
  is not used at all (nothing read, written or removed there): one warning on standard error per process,
  and the run goes on uncached;
* every entry is authenticated: HMAC-SHA256 under a per-user secret, :data:`KEY_FILE` in the directory
  (32 random bytes, mode 0600, made once: written to a temporary file and hard-linked into place, so no
  reader ever sees a partial key; a key file that is not the user's, is readable by others or has the wrong
  size makes the directory refused). A ``.pdslc`` file is ``PDSLC1`` + MAC + pickle; a library is the
  compiler's bytes + ``PDSLSO1\\0`` + MAC (trailing bytes after an ELF image do not disturb the loader). The
  MAC covers the file's name too (an entry moved to another key does not verify);
* an entry is opened without following links, must be a regular file owned by the user and not writable by
  group or others, is read whole and verified **before** ``pickle.loads`` or ``dlopen``. One that fails
  (damaged, truncated, from an older pdsl, planted) is removed and counted (:attr:`ModelCache.rejected`,
  shown by ``pdsl -v``); the normal miss path rebuilds it. A library is loaded through ``/proc/self/fd/N`` of
  the very descriptor whose bytes were verified (the inode cannot be swapped between check and load; the
  descriptor stays open for the process, so the name is never reused for another library), else, without
  ``/proc``, from a copy of the verified bytes in a fresh private temporary directory.

**Temporaries** (``.tmp-<pid>-<random>…``) are created with ``O_EXCL`` and held under an exclusive ``flock``
by their writer until renamed into place. A run (once per process, and when it prunes) removes the ones
whose lock is free and that are older than :data:`TEMP_GRACE_S` (a process killed with ``kill -9`` releases
its locks; a live writer, in any process or container on the machine, keeps its file). Where ``flock`` is not
available the writer's pid is checked instead, and an older-style name without a pid goes after an hour.
The same helpers (:func:`temporary_file`, :func:`temporary_dir`, :func:`sweep_temporaries`) serve build
directories elsewhere (the C compiler's work directory, FMU builds) and every output pdsl writes atomically
(``.<name>.tmp-<pid>-<random>…`` next to the output, :func:`output_temp_prefix`: the folder a CSV of
``simulate -o`` is written in, the directory of ``compile -o``), whose abandoned ones the next write into the same directory removes
(:func:`sweep_output_temporaries`).

Environment: ``PDSL_CACHE_DIR`` (default ``$XDG_CACHE_HOME/pdsl`` or ``~/.cache/pdsl``; ``PDSL_CACHE``, the
name the torch backend's compiled core once read, is taken when ``PDSL_CACHE_DIR`` is not set),
``PDSL_NO_CACHE=1`` (as ``--no-cache``: no :class:`ModelCache` exists, nothing in the directory is read or
written), ``PDSL_CACHE_MAX_MB``.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import os
import pickle
import re
import secrets
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

__all__ = ["ModelCache", "Deferred", "default_cache", "set_default_cache", "using", "record_sources",
           "note_source", "cache_dir", "FORMAT", "DEFAULT_MAX_BYTES", "KEY_FILE", "temporary_file",
           "temporary_dir", "sweep_temporaries", "TEMP_GRACE_S", "output_temp_prefix", "sweep_output_temporaries"]

FORMAT = 2  # bump when the layout of an entry (or of the objects it pickles) changes
DEFAULT_MAX_BYTES = 512 * 1024 * 1024
SUFFIX = ".pdslc"
LIBRARY = (".so",)  # compiled right-hand sides (pdsl.sim.compiled: rhs-<sha256>.so), bounded with the entries
KEY_FILE = "cache.key"  # the per-user secret the entries are authenticated with
KEY_BYTES = 32
ENTRY_MAGIC = b"PDSLC1"  # .pdslc: magic, MAC, pickle
LIBRARY_MAGIC = b"PDSLSO1\x00"  # .so: library bytes, magic, MAC
MAC_BYTES = 32
TEMP = ".tmp-"  # temporaries in the cache directory: .tmp-<pid>-<hex><suffix>
TEMP_GRACE_S = 60.0  # an unlocked temporary younger than this is left alone (its writer may not have locked it yet)
TEMP_UNLOCKABLE_S = 3600.0  # no flock (or an older-style name without a pid): removed after this long


def _entry(name: str) -> bool:
    """An entry's name (not a temporary's, not the key file's)."""
    if name.startswith(TEMP):
        return False
    return name.endswith(SUFFIX) or (name.startswith("rhs-") and name.endswith(LIBRARY))

# ------------------------------------------------------------------ source recording (the parser reports here)
_RECORDING: ContextVar[dict[str, str] | None] = ContextVar("pdsl_cache_sources", default=None)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def note_source(path: str, text: str) -> None:
    """Called by :func:`pdsl.parse.parser.parse_file` for every file it reads."""
    seen = _RECORDING.get()
    if seen is not None:
        seen[str(path)] = _digest(text)


@contextmanager
def record_sources() -> Iterator[dict[str, str]]:
    """``{path: sha256 of its text}`` of every file parsed inside the block."""
    seen: dict[str, str] = {}
    token = _RECORDING.set(seen)
    try:
        yield seen
    finally:
        _RECORDING.reset(token)


# ------------------------------------------------------------------ deferred (lazily unpickled) objects
class Deferred:
    """A pickled object whose cheap attributes (``facts``) are read without unpickling it.

    Any other attribute unpickles the object (importing sympy) once and reads it there; equality,
    hashing and ``repr`` are the object's own."""

    __slots__ = ("_blob", "_facts", "_value")

    def __init__(self, blob: bytes, facts: dict[str, Any]):
        object.__setattr__(self, "_blob", blob)
        object.__setattr__(self, "_facts", dict(facts))
        object.__setattr__(self, "_value", None)

    @classmethod
    def wrap(cls, value: Any, fact_names: tuple[str, ...]) -> Deferred:
        d = cls(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), {n: getattr(value, n) for n in fact_names})
        object.__setattr__(d, "_value", value)
        return d

    def resolve(self) -> Any:
        value = object.__getattribute__(self, "_value")
        if value is None:
            value = pickle.loads(object.__getattribute__(self, "_blob"))
            object.__setattr__(self, "_value", value)
        return value

    @property
    def loaded(self) -> bool:
        return object.__getattribute__(self, "_value") is not None

    def __getattr__(self, name: str):
        facts = object.__getattribute__(self, "_facts")
        if name in facts:
            return facts[name]
        return getattr(self.resolve(), name)

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __eq__(self, other):
        return self.resolve() == (other.resolve() if isinstance(other, Deferred) else other)

    def __hash__(self):
        return hash(self.resolve())

    def __repr__(self):
        return repr(self.resolve())

    def __reduce__(self):
        return (Deferred, (object.__getattribute__(self, "_blob"), object.__getattribute__(self, "_facts")))


def unwrap(obj: Any) -> Any:
    """The object behind a :class:`Deferred` (anything else unchanged)."""
    return obj.resolve() if isinstance(obj, Deferred) else obj


# ------------------------------------------------------------------ temporaries (locked while their writer lives)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


def _uid() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None


def _temp_name(prefix: str, suffix: str) -> str:
    return f"{prefix}{os.getpid()}-{secrets.token_hex(8)}{suffix}"


def _lock(fd: int) -> None:
    """An exclusive flock on ``fd`` (best effort: a file system without locks leaves the pid in the name)."""
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pass


def temporary_file(directory: str | Path, prefix: str = TEMP, suffix: str = "", mode: int = 0o600) -> tuple[int, str]:
    """A new file ``<directory>/<prefix><pid>-<hex><suffix>`` (``O_EXCL``, ``mode``), locked: ``(fd, path)``.

    Write through ``fd``, ``os.replace`` the path into place, then close ``fd`` (closing releases the lock; a
    process that dies releases it too, and :func:`sweep_temporaries` may then remove the file)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    for _ in range(64):
        path = os.path.join(directory, _temp_name(prefix, suffix))
        try:
            fd = os.open(path, flags, mode)
        except FileExistsError:
            continue
        _lock(fd)
        return fd, path
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(directory))


@contextmanager
def temporary_dir(directory: str | Path, prefix: str) -> Iterator[Path]:
    """A new private directory ``<directory>/<prefix><pid>-<hex>`` (0700), locked while the block runs and
    removed after it (unless the block moved it away)."""
    for _ in range(64):
        path = Path(directory) / _temp_name(prefix, "")
        try:
            path.mkdir(mode=0o700)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(errno.EEXIST, "no free temporary name", str(directory))
    fd = -1
    try:
        fd = os.open(path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
        _lock(fd)
    except OSError:
        pass
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        if fd >= 0:
            os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists
        return True
    return True


def _abandoned(path: str, is_dir: bool, pid: int | None, age: float) -> bool:
    """Whether the temporary's writer is gone: its lock can be taken (else, without locks, its pid is dead)."""
    if fcntl is not None:
        try:
            fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | _NONBLOCK | (_DIRECTORY if is_dir else 0))
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True  # nobody holds it (closing our descriptor below releases it again)
        except BlockingIOError:
            return False
        except OSError:
            pass  # no locks on this file system: the pid decides
        finally:
            os.close(fd)
    if pid is None:
        return age > TEMP_UNLOCKABLE_S
    return not _pid_alive(pid) or age > TEMP_UNLOCKABLE_S


def sweep_temporaries(directory: str | Path, prefix: str, *, legacy: bool | str = False,
                      grace_s: float = TEMP_GRACE_S, pattern: str | None = None,
                      dead_grace_s: float | None = None) -> tuple[int, int]:
    """Remove the abandoned temporaries ``<prefix><pid>-<hex>…`` (files or directories) in ``directory``.

    Only the user's own entries are looked at; one is abandoned when it is older than ``grace_s`` and its
    writer's lock is free (see :func:`temporary_file`). ``legacy``: other names starting with ``prefix`` (an
    older pdsl's ``mkstemp`` names, no pid, no lock) go when older than an hour; a string: only those that
    match it whole (a regular expression). ``pattern``: a regular expression (group 1: the pid) a temporary's
    name must start with, instead of ``prefix`` followed by the pid (names must still start with ``prefix``).
    ``dead_grace_s``: the grace instead of ``grace_s`` when no process of this machine (pid namespace) has the
    writer's pid (e.g. 0: what ``kill -9`` just left goes now; a writer not yet locked is alive). Returns
    ``(removed, bytes of the files left)``."""
    pattern = re.compile(pattern or (re.escape(prefix) + r"(\d+)-[0-9a-f]{16}"))
    old_style = re.compile(legacy) if isinstance(legacy, str) else None
    uid = _uid()
    removed = left = 0
    now = time.time()
    try:
        it = os.scandir(directory)
    except OSError:
        return 0, 0
    with it:
        for entry in it:
            name = entry.name
            if not name.startswith(prefix):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if uid is not None and st.st_uid != uid:
                continue
            m = pattern.match(name)
            if m is None and (not legacy or (old_style is not None and not old_style.fullmatch(name))):
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            age = now - st.st_mtime
            pid = int(m.group(1)) if m is not None else None
            judged = age >= grace_s or (dead_grace_s is not None and pid is not None and age >= dead_grace_s
                                        and not _pid_alive(pid))
            if judged and not stat.S_ISLNK(st.st_mode):
                gone = _abandoned(entry.path, is_dir, pid, age) if pid is not None else age > TEMP_UNLOCKABLE_S
            else:
                gone = stat.S_ISLNK(st.st_mode)  # never made by pdsl: a link named like a temporary just goes
            if gone:
                try:
                    if is_dir:
                        shutil.rmtree(entry.path)
                    else:
                        os.unlink(entry.path)
                    removed += 1
                    continue
                except OSError:
                    pass
            if stat.S_ISREG(st.st_mode):
                left += st.st_size
    return removed, left


OUTPUT_TEMP = r"\..+\.tmp-(\d+)-[0-9a-f]{16}"  # .<name>.tmp-<pid>-<hex>...: a temporary of an output (any name)
_NAME_MAX = 255  # bytes in a file name (Linux, macOS): <name> is shortened in the temporary's name to fit
_MKSTEMP = r"[a-z0-9_]{8}"  # what tempfile.mkstemp put between prefix and suffix (pdsl before output temporaries)


def output_temp_prefix(target: str | Path) -> str:
    """``.<name>.tmp-`` for the temporaries of the output ``target`` (files or directories, made with
    :func:`temporary_file` / :func:`temporary_dir` next to it); a long name is shortened so that the temporary's
    name (pid, random part and a suffix added) still fits."""
    name = Path(target).name
    while len(os.fsencode(name)) > _NAME_MAX - 100:
        name = name[:-1]
    return f".{name}.tmp-"


def sweep_output_temporaries(directory: str | Path, target: str | Path | None = None) -> int:
    """Remove the abandoned temporaries of pdsl's outputs in ``directory`` (``.<name>.tmp-<pid>-<hex>…`` of any
    output: what ``kill -9`` of a writer leaves; a live writer's, locked, are kept; see
    :func:`sweep_temporaries`; one whose writer's pid is gone goes at once, e.g. when ``fit --resume`` follows a
    killed run). ``target``: an output about to be written there; its temporaries as an older pdsl
    named them (``.<name>.<8 random characters><suffix>``, no lock) go too when older than an hour. Returns how
    many were removed."""
    removed, _ = sweep_temporaries(directory, ".", pattern=OUTPUT_TEMP, dead_grace_s=0.0)
    if target is not None:
        t = Path(target)
        legacy = re.escape(f".{t.name}.") + _MKSTEMP + re.escape(t.suffix)
        more, _ = sweep_temporaries(directory, f".{t.name}.", pattern=OUTPUT_TEMP, legacy=legacy, dead_grace_s=0.0)
        removed += more
    return removed


# ------------------------------------------------------------------ the cache directory
def cache_dir() -> Path:
    env = os.environ.get("PDSL_CACHE_DIR") or os.environ.get("PDSL_CACHE")  # PDSL_CACHE: the torch core's old name
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pdsl"


def _versions() -> str:
    from . import __version__

    try:  # the installed CasADi's version without importing it (the cached path imports it anyway later)
        from importlib.metadata import version

        casadi = version("casadi")
    except Exception:  # noqa: BLE001 - metadata missing: the import tells
        import casadi as ca

        casadi = ca.__version__
    return f"pdsl {__version__}; casadi {casadi}; python {sys.version_info[:3]}; format {FORMAT}; code {_code_stamp()}"


_STAMP: str | None = None


def _code_stamp() -> str:
    """The size and modification time of every source file of the installed pdsl and its grammar: an editable
    install whose code changed (same version) must not read entries its old code wrote. ~1 ms (stat only)."""
    global _STAMP
    if _STAMP is None:
        here = Path(__file__).resolve().parent
        entries = []
        for root in (here, here.parent / "grammars", here / "grammars"):
            if not root.is_dir():
                continue
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                for name in sorted(filenames):
                    if name.endswith((".py", ".lark")):
                        st = os.stat(os.path.join(dirpath, name))
                        entries.append(f"{os.path.relpath(os.path.join(dirpath, name), here)}:{st.st_size}:{st.st_mtime_ns}")
        _STAMP = hashlib.sha256("\n".join(entries).encode()).hexdigest()[:16]
    return _STAMP


_WARNED: list[bool] = [False]  # one warning per process about a refused directory


def _warn_refused(root: Path, why: str) -> None:
    if _WARNED[0]:
        return
    _WARNED[0] = True
    print(f"pdsl: warning: the cache directory {root} is not used: {why}. This run is uncached "
          "(nothing there is read, written or removed); use a private directory (chmod 700, owned by you) or "
          "set PDSL_CACHE_DIR to one, or pass --no-cache.", file=sys.stderr)


def _insecure_dir(st: os.stat_result, uid: int | None, *, strict: bool) -> str:
    """Why a directory may not hold the cache ('' when it may). ``strict``: the cache directory itself (owned
    by the user, not writable by group or others); else an ancestor (not another user's, root aside; not
    writable by others unless sticky)."""
    mode = stat.S_IMODE(st.st_mode)
    if strict:
        if uid is not None and st.st_uid != uid:
            return f"it is owned by uid {st.st_uid}, not by you (uid {uid})"
        if mode & 0o022:
            who = {0o022: "group and others", 0o020: "group", 0o002: "others"}[mode & 0o022]
            return f"it is writable by {who} (mode {mode:04o})"
        return ""
    if uid is not None and st.st_uid not in (uid, 0):
        return f"owned by uid {st.st_uid}"
    if mode & 0o002 and not mode & stat.S_ISVTX:
        return f"writable by others and not sticky (mode {mode:04o})"
    return ""


def _mac(key: bytes, kind: bytes, name: str, payload: bytes) -> bytes:
    h = hmac.new(key, kind + b"\x00" + name.encode("utf-8", "surrogatepass") + b"\x00", hashlib.sha256)
    h.update(payload)
    return h.digest()


_PINNED: list[int] = []  # descriptors of libraries loaded through /proc/self/fd/N: never closed (N is never reused)


def _fd_path(fd: int) -> str | None:
    """A path that opens exactly the file behind ``fd`` (Linux: /proc/self/fd/N), or None."""
    path = f"/proc/self/fd/{fd}"
    try:
        return path if os.path.samestat(os.stat(path), os.fstat(fd)) else None
    except OSError:
        return None


class ModelCache:
    """Compiled models in one directory, bounded to ``max_bytes``; entries authenticated (see the module)."""

    def __init__(self, root: str | Path | None = None, *, max_bytes: int | None = None):
        self.root = Path(root) if root is not None else cache_dir()
        if max_bytes is None:
            env = os.environ.get("PDSL_CACHE_MAX_MB")
            max_bytes = int(float(env) * 1024 * 1024) if env else DEFAULT_MAX_BYTES
        self.max_bytes = max_bytes
        self.rejected = 0  # entries removed: damaged, unauthenticated, not ours, or failing to load
        self.swept = 0  # abandoned temporaries removed
        self.refused = ""  # why the directory is not used ('' while it is, or before the first use)
        self._status: str | None = None
        self._secret: bytes | None = None
        self._state: bool | None = None  # None: not opened yet

    @property
    def last(self) -> str | None:
        """What the last lookup or store did: "hit" | "miss" | "stored" | "not stored: why" | "not used: why",
        followed by the entries rejected and temporaries removed so far (for -v and the tests)."""
        if self._status is None:
            return None
        notes = []
        if self.rejected:
            notes.append(f"{self.rejected} damaged or unauthenticated {'entry' if self.rejected == 1 else 'entries'} removed")
        if self.swept:
            notes.append(f"{self.swept} abandoned {'temporary' if self.swept == 1 else 'temporaries'} removed")
        return "; ".join([self._status, *notes])

    @last.setter
    def last(self, value: str | None) -> None:
        self._status = value

    # -- keys
    def key(self, source: str | Path, text: str, options) -> str:
        path = str(source)
        where = "" if os.path.isabs(path) else os.getcwd()
        parts = [_versions(), path, where, repr(options), _digest(text)]
        return hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()

    def _file(self, key: str) -> Path:
        return self.root / (key + SUFFIX)

    # -- trust
    def usable(self) -> bool:
        """Whether the directory is used: created if missing, checked, its key read (once per instance)."""
        if self._state is None:
            self._state = self._open()
        return self._state

    _usable = usable  # the name pdsl.sim.compiled asked for

    def _refuse(self, why: str) -> bool:
        self.refused = why
        _warn_refused(self.root, why)
        return False

    def _open(self) -> bool:
        uid = _uid()
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            st = os.stat(self.root)
        except OSError as exc:  # not creatable (read-only home, ...): quietly uncached, as before
            self.refused = f"{exc.strerror or exc}"
            return False
        if not stat.S_ISDIR(st.st_mode):
            self.refused = "not a directory"
            return False
        why = _insecure_dir(st, uid, strict=True)
        if why:
            return self._refuse(why)
        real = Path(os.path.realpath(self.root))
        for parent in real.parents:  # a few stats: an ancestor others could rename the directory in
            try:
                why = _insecure_dir(os.stat(parent), uid, strict=False)
            except OSError:
                continue
            if why:
                return self._refuse(f"its ancestor {parent} is {why}")
        try:
            self._secret = self._read_key(uid)
        except _Refused as exc:
            return self._refuse(str(exc))
        except OSError as exc:
            self.refused = f"the key file: {exc.strerror or exc}"
            return False
        swept, _ = sweep_temporaries(self.root, TEMP, legacy=True)
        self.swept += swept
        return True

    def _read_key(self, uid: int | None) -> bytes:
        path = self.root / KEY_FILE
        for attempt in range(50):
            try:
                fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | _NONBLOCK)
            except FileNotFoundError:
                self._make_key(path)
                continue
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise _Refused(f"its key file {KEY_FILE} is a symbolic link") from None
                raise
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise _Refused(f"its key file {KEY_FILE} is not a regular file")
                if uid is not None and st.st_uid != uid:
                    raise _Refused(f"its key file {KEY_FILE} is owned by uid {st.st_uid}, not by you")
                if stat.S_IMODE(st.st_mode) & 0o077:
                    raise _Refused(f"its key file {KEY_FILE} is accessible by others (mode {stat.S_IMODE(st.st_mode):04o})")
                data = os.read(fd, KEY_BYTES + 1)
            finally:
                os.close(fd)
            if len(data) == KEY_BYTES:
                return data
            if len(data) > KEY_BYTES or attempt >= 49:
                raise _Refused(f"its key file {KEY_FILE} is damaged ({len(data)} bytes, not {KEY_BYTES}); remove it")
            time.sleep(0.01)  # written by O_EXCL on a file system without hard links: being filled in
        raise _Refused(f"its key file {KEY_FILE} could not be read")

    def _make_key(self, path: Path) -> None:
        """32 random bytes, 0600: written to a locked temporary and hard-linked into place (atomic, exclusive:
        a concurrent maker's key wins, ours goes). Without hard links: O_EXCL, then the bytes."""
        fd, tmp = temporary_file(self.root, TEMP, ".key")
        try:
            os.write(fd, secrets.token_bytes(KEY_BYTES))
            os.fsync(fd)
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
            except OSError:  # no hard links here
                try:
                    kfd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
                except FileExistsError:
                    return
                try:
                    os.write(kfd, secrets.token_bytes(KEY_BYTES))
                finally:
                    os.close(kfd)
        finally:
            self._remove(Path(tmp))
            os.close(fd)

    def _read_verified(self, path: Path, kind: bytes, keep_open: bool = False):
        """``(fd or None, payload)`` of an authenticated entry, or None (missing: a plain miss; anything else
        wrong: the file is removed and counted). Nothing of an entry is used before its MAC checks out."""
        try:
            fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | _NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError:  # a link (ELOOP), a directory, unreadable: not ours to use
            self._reject(path)
            return None
        ok = False
        try:
            st = os.fstat(fd)
            uid = _uid()
            if (not stat.S_ISREG(st.st_mode) or (uid is not None and st.st_uid != uid)
                    or stat.S_IMODE(st.st_mode) & 0o022 or st.st_size > self.max_bytes + 64):
                self._reject(path)
                return None
            chunks, size = [], 0
            while True:
                chunk = os.read(fd, max(st.st_size - size, 0) + 1)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > self.max_bytes + 64:
                    break
            data = b"".join(chunks)
            payload = self._check(data, kind, path.name)
            if payload is None:
                self._reject(path)
                return None
            ok = True
            return (fd if keep_open else None), payload
        finally:
            if not (ok and keep_open):
                os.close(fd)

    def _check(self, data: bytes, kind: bytes, name: str) -> bytes | None:
        if kind == b"pdslc":
            head = len(ENTRY_MAGIC) + MAC_BYTES
            if len(data) < head or not data.startswith(ENTRY_MAGIC):
                return None
            mac, payload = data[len(ENTRY_MAGIC):head], data[head:]
        else:
            tail = len(LIBRARY_MAGIC) + MAC_BYTES
            if len(data) < tail or data[-tail:-MAC_BYTES] != LIBRARY_MAGIC:
                return None
            mac, payload = data[-MAC_BYTES:], data[:-tail]
        if not hmac.compare_digest(mac, _mac(self._secret, kind, name, payload)):
            return None
        return payload

    def _reject(self, path: Path) -> None:
        self.rejected += 1
        self._remove(path)

    # -- reading
    def load(self, key: str):
        """The cached :class:`~pdsl.pipeline.Compiled`, or None (missing, stale import, damaged, not authentic)."""
        if not self.usable():
            self.last = f"not used: {self.refused}" if self.refused else "miss"
            return None
        f = self._file(key)
        got = self._read_verified(f, b"pdslc")
        if got is None:
            self.last = "miss"
            return None
        try:
            entry = pickle.loads(got[1])  # authenticated: written by this user's pdsl
            if entry.get("format") != FORMAT:
                raise ValueError("format")
        except Exception:  # noqa: BLE001 - an authentic entry this code cannot read is a miss, and goes
            self._reject(f)
            self.last = "miss"
            return None
        from .diagnostics import register_source

        for path, digest in entry["sources"].items():
            try:
                text = Path(path).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                self.last = "miss"
                return None
            if _digest(text) != digest:
                self.last = "miss"
                return None
            register_source(path, text.removeprefix("\ufeff"))  # diagnostics quote the line, as after parsing
        try:
            os.utime(f)  # recently used: kept longest
        except OSError:
            pass
        self.last = "hit"
        return entry["compiled"]

    # -- writing
    def _write(self, name: str, data: bytes) -> None:
        """``data`` into ``<root>/<name>`` atomically (a locked temporary, then ``os.replace``)."""
        fd, tmp = temporary_file(self.root, TEMP, os.path.splitext(name)[1])
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.replace(tmp, self.root / name)
        except BaseException:
            self._remove(Path(tmp))
            raise
        finally:
            os.close(fd)

    def store(self, key: str, compiled, sources: dict[str, str]) -> bool:
        """Write an entry atomically; False (and nothing written) when it cannot be pickled or written."""
        if not self.usable():
            self.last = f"not stored: the cache directory is not used: {self.refused or 'unusable'}"
            return False
        try:
            blob = pickle.dumps({"format": FORMAT, "sources": dict(sources), "compiled": compiled},
                                protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - an object that does not pickle is simply not cached
            self.last = f"not stored: {type(exc).__name__}: {exc}"[:200]
            return False
        if len(blob) > self.max_bytes:
            self.last = "not stored: larger than the cache"
            return False
        name = self._file(key).name
        try:
            self._write(name, ENTRY_MAGIC + _mac(self._secret, b"pdslc", name, blob) + blob)
        except OSError as exc:
            self.last = f"not stored: {exc}"
            return False
        self.last = "stored"
        self.prune()
        return True

    # -- compiled libraries (pdsl.sim.compiled, pdsl.sim.native)
    def library_file(self, name: str) -> Path | None:
        """``<root>/<name>`` when the directory is used, else None."""
        return self.root / name if self.usable() else None

    def load_library(self, name: str, load: Callable[[str], Any]):
        """``load(path)`` of the authenticated library ``name`` (e.g. ``rhs-<key>.so``), or None (missing, or
        rejected and removed: the caller builds it again).

        ``path`` is ``/proc/self/fd/N`` of the descriptor whose bytes were verified (kept open for the process:
        the loader maps exactly the inode that was checked, which only this user can write; the name
        ``/proc/self/fd/N`` is never reused, so the dynamic loader's by-name reuse cannot hand out another
        library). Without ``/proc``: the verified bytes copied into a fresh 0700 temporary directory, loaded
        from there, the directory removed."""
        if not self.usable():
            return None
        path = self.root / name
        got = self._read_verified(path, b"so", keep_open=True)
        if got is None:
            return None
        fd, payload = got
        where = _fd_path(fd)
        try:
            if where is not None:
                handle = load(where)
            else:
                os.close(fd)
                fd = -1
                with temporary_dir(tempfile.gettempdir(), "pdsl-lib-") as d:
                    copy = d / name
                    copy.write_bytes(payload)
                    handle = load(str(copy))
        except (RuntimeError, OSError):  # authentic but not loadable here (another machine's build): rebuilt
            if fd >= 0:
                os.close(fd)
            self._reject(path)
            return None
        if fd >= 0:
            _PINNED.append(fd)
        try:
            os.utime(path)  # least recently used goes first
        except OSError:
            pass
        return handle

    def store_library(self, name: str, data: bytes) -> Path | None:
        """The library bytes ``data`` as ``<root>/<name>`` with their MAC (atomic), then prune; the path, or None
        when the directory is not used or the write failed."""
        if not self.usable():
            return None
        try:
            self._write(name, data + LIBRARY_MAGIC + _mac(self._secret, b"so", name, data))
        except OSError:
            return None
        self.prune()
        return self.root / name

    def prune(self) -> None:
        """Remove abandoned temporaries, then the least recently used entries (and compiled libraries) until the
        directory, live temporaries included, fits ``max_bytes``."""
        if not self.usable():
            return
        swept, live = sweep_temporaries(self.root, TEMP, legacy=True)
        self.swept += swept
        entries = []
        try:
            for f in self.root.iterdir():
                if _entry(f.name):
                    try:
                        st = f.lstat()
                    except OSError:
                        continue
                    entries.append((st.st_mtime, st.st_size, f))
        except OSError:
            return
        total = live + sum(size for _, size, _ in entries)
        for _, size, f in sorted(entries, key=lambda e: e[0]):
            if total <= self.max_bytes:
                break
            if self._remove(f) or not f.exists():
                total -= size

    def clear(self) -> None:
        if self.usable():
            for f in self.root.iterdir():
                if _entry(f.name):
                    self._remove(f)

    @staticmethod
    def _remove(f: Path) -> bool:
        try:
            f.unlink()
            return True
        except OSError:
            return False


class _Refused(Exception):
    """The directory (or its key file) is not safe to use."""


# ------------------------------------------------------------------ the active cache
_DEFAULT: ContextVar[ModelCache | None] = ContextVar("pdsl_model_cache", default=None)


def default_cache() -> ModelCache | None:
    """The cache :func:`pdsl.pipeline.compile_model` uses when not told otherwise (None: no cache)."""
    return _DEFAULT.get()


def set_default_cache(cache: ModelCache | None) -> None:
    _DEFAULT.set(cache)


@contextmanager
def using(cache: ModelCache | None) -> Iterator[ModelCache | None]:
    token = _DEFAULT.set(cache)
    try:
        yield cache
    finally:
        _DEFAULT.reset(token)
