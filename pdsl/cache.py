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
never see half an entry; an unreadable entry is a miss and is removed. The directory is bounded
(:data:`DEFAULT_MAX_BYTES`, ``PDSL_CACHE_MAX_MB``): the least recently used entries go first.

Environment: ``PDSL_CACHE_DIR`` (default ``$XDG_CACHE_HOME/pdsl`` or ``~/.cache/pdsl``),
``PDSL_NO_CACHE=1`` (as ``--no-cache``), ``PDSL_CACHE_MAX_MB``. The directory must belong to the user
(entries are pickles, trusted like ``__pycache__``); one that does not is not used.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

__all__ = ["ModelCache", "Deferred", "default_cache", "set_default_cache", "using", "record_sources",
           "note_source", "cache_dir", "FORMAT", "DEFAULT_MAX_BYTES"]

FORMAT = 2  # bump when the layout of an entry (or of the objects it pickles) changes
DEFAULT_MAX_BYTES = 512 * 1024 * 1024
SUFFIX = ".pdslc"
LIBRARY = (".so",)  # compiled right-hand sides (pdsl.sim.compiled: rhs-<sha256>.so), bounded with the entries


def _entry(name: str) -> bool:
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


# ------------------------------------------------------------------ the cache directory
def cache_dir() -> Path:
    env = os.environ.get("PDSL_CACHE_DIR")
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


class ModelCache:
    """Compiled models in one directory, bounded to ``max_bytes``."""

    def __init__(self, root: str | Path | None = None, *, max_bytes: int | None = None):
        self.root = Path(root) if root is not None else cache_dir()
        if max_bytes is None:
            env = os.environ.get("PDSL_CACHE_MAX_MB")
            max_bytes = int(float(env) * 1024 * 1024) if env else DEFAULT_MAX_BYTES
        self.max_bytes = max_bytes
        self.last: str | None = None  # "hit" | "miss" | "stored" | "not stored: why" (for -v and the tests)

    # -- keys
    def key(self, source: str | Path, text: str, options) -> str:
        path = str(source)
        where = "" if os.path.isabs(path) else os.getcwd()
        parts = [_versions(), path, where, repr(options), _digest(text)]
        return hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()

    def _file(self, key: str) -> Path:
        return self.root / (key + SUFFIX)

    def _usable(self) -> bool:
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            st = self.root.stat()
        except OSError:
            return False
        return not hasattr(os, "getuid") or st.st_uid == os.getuid()

    # -- reading
    def load(self, key: str):
        """The cached :class:`~pdsl.pipeline.Compiled`, or None (missing, stale import, unreadable)."""
        f = self._file(key)
        try:
            blob = f.read_bytes()
        except OSError:
            self.last = "miss"
            return None
        if not self._usable():
            self.last = "miss"
            return None
        try:
            entry = pickle.loads(blob)
            if entry.get("format") != FORMAT:
                raise ValueError("format")
        except Exception:  # noqa: BLE001 - a damaged entry is a miss, and goes
            self._remove(f)
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
    def store(self, key: str, compiled, sources: dict[str, str]) -> bool:
        """Write an entry atomically; False (and nothing written) when it cannot be pickled or written."""
        if not self._usable():
            self.last = "not stored: the cache directory is not usable"
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
        try:
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=self.root)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(blob)
                os.replace(tmp, self._file(key))
            except BaseException:
                self._remove(Path(tmp))
                raise
        except OSError as exc:
            self.last = f"not stored: {exc}"
            return False
        self.last = "stored"
        self.prune()
        return True

    def prune(self) -> None:
        """Remove the least recently used entries (and compiled libraries) until the directory fits ``max_bytes``."""
        entries = []
        try:
            for f in self.root.iterdir():
                if _entry(f.name):
                    try:
                        st = f.stat()
                    except OSError:
                        continue
                    entries.append((st.st_mtime, st.st_size, f))
        except OSError:
            return
        total = sum(size for _, size, _ in entries)
        for _, size, f in sorted(entries, key=lambda e: e[0]):
            if total <= self.max_bytes:
                break
            if self._remove(f) or not f.exists():
                total -= size

    def clear(self) -> None:
        if self.root.is_dir():
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
