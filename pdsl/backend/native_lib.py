"""Shared libraries built from generated C: the C compiler, a private build directory, the authenticated cache entry.

Two users build native code from CasADi's generated C and share these rules: the compiled right-hand sides of the
simulator (:mod:`pdsl.sim.compiled`, :mod:`pdsl.sim.native`) and the torch core (:mod:`pdsl.backend.torch_core`).
The C is compiled in a private work directory (``$TMPDIR/pdsl-cc-<pid>-<hex>``, 0700, locked while the build runs;
an abandoned one, left by a killed run, is removed by the next build); the library's bytes go into the cache
directory with a MAC (:meth:`pdsl.cache.ModelCache.store_library`) as ``rhs-<key>.so``, and a cached library is
loaded only after its bytes are authenticated (:meth:`pdsl.cache.ModelCache.load_library`). With no cache the
library is built in the work directory and kept for the process only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["WORK_PREFIX", "build", "find_compiler", "library_path", "load_cached"]

WORK_PREFIX = "pdsl-cc-"  # the compiler's work directories in the temporary directory
_COMPILER: list = []  # [path or None], found once per process


def find_compiler() -> str | None:
    """The C compiler: ``$CC``, else the first of cc, gcc, clang on the PATH; None when there is none."""
    if not _COMPILER:
        cc = os.environ.get("CC")
        found = None
        for name in ([cc] if cc else ["cc", "gcc", "clang"]):
            found = shutil.which(name)
            if found:
                break
        _COMPILER.append(found)
    return _COMPILER[0]


def library_path(cache, key: str) -> Path | None:
    """Where the library ``key`` lives in the cache directory; None without a cache or when it is not used."""
    if cache is None:
        return None
    return cache.library_file(f"rhs-{key}.so")


def load_cached(key: str, cache, load, loaded: dict):
    """The library ``key``: from ``loaded`` (this process), else loaded (``load``) from the cache directory once its
    bytes are authenticated (a damaged or foreign one is removed there: rebuilt), else None."""
    if key in loaded:
        return loaded[key]
    if cache is None:
        return None
    return cache.load_library(f"rhs-{key}.so", load)


def build(src: str, key: str, cc: str, cache, flags: tuple[str, ...], load):
    """Compile ``src`` into a shared object in a private work directory, store its bytes (authenticated,
    atomically) in the cache directory, and load it (``load``) from the work directory."""
    from ..cache import sweep_temporaries, temporary_dir

    tmp = tempfile.gettempdir()
    sweep_temporaries(tmp, WORK_PREFIX)  # work directories of killed builds
    with temporary_dir(tmp, WORK_PREFIX) as work:
        c_file = os.path.join(work, "pdsl_rhs.c")
        with open(c_file, "w", encoding="utf-8") as fh:
            fh.write(src)
        out = os.path.join(work, f"rhs-{key[:16]}.so")
        proc = subprocess.run([cc, *flags, "-o", out, c_file, "-lm"], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{Path(cc).name} exited with {proc.returncode}: {proc.stderr.strip()[-300:]}")
        if cache is not None:
            with open(out, "rb") as fh:
                cache.store_library(f"rhs-{key}.so", fh.read())  # no-op when the directory is not used
        return load(out)  # loaded now: the work directory may go
