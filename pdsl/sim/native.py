"""Compiled explicit integration: ``--integrator dop853``, Dormand–Prince 8(5,3) in C around the generated rhs.

CVODES spends most of a small model's simulation in its own bookkeeping, not in the right-hand side: on the
4-state double pendulum the rhs costs ~1 µs per call compiled or not, and CasADi's integrator wrapper reads the
process CPU clock twice around every call (docs/simulate.md). For small non-stiff ODEs a compiled explicit
method is faster: this module generates C for ``f(t, x, p)`` (CasADi's code generator, inputs bound in),
appends the DOP853 driver of :func:`pdsl.numerics.dop853.c_driver` (the tableau's one home) and builds one shared
object with the system's C compiler, cached like the compiled rhs of :mod:`pdsl.sim.compiled`
(``<cache dir>/rhs-<sha256>.so``, atomic, counted in the cache's size bound; a temporary build under
``--no-cache``). The driver is called through ``ctypes``, which releases the GIL: batches run in threads.

The method and its step control are scipy's ``solve_ivp(method="DOP853")``: at the same rtol/atol it takes the
same steps (tested: the evaluation count agrees and the trajectories to rounding). It is explicit: a stiff
system makes it take tiny steps (use ``cvodes-bdf``), and it is for ODEs only (DAEs: ``idas``).
"""

from __future__ import annotations

import ctypes
import hashlib
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import casadi as ca
import numpy as np

from ..diagnostics import PdslError
from . import compiled

__all__ = ["NATIVE_INTEGRATORS", "NativeIntegrator", "native_integrator"]

NATIVE_INTEGRATORS = ("dop853",)
FLAGS = ("-O2", "-fPIC", "-shared")  # the driver's loops gain from -O2; the rhs is the same arithmetic either way
MAX_STEPS = 10_000_000
ENTRY = "pdsl_f"
_FAILURES = {
    1: f"more than {MAX_STEPS:,} steps",
    2: "the step size fell below 10 ulp of t (a singularity, or a stiff system: try --integrator cvodes-bdf)",
    3: "the right-hand side is not finite (NaN or inf)",
    4: "out of memory",
}
_LIBS: dict[str, ctypes.CDLL] = {}  # key -> loaded library (this process)
_MADE: dict = {}  # identities of the rhs pieces -> (them, NativeIntegrator)


@dataclass
class NativeIntegrator:
    """A loaded DOP853 library for one right-hand side ``f(t, x, p)``."""

    fn: object  # the ctypes function pdsl_dop853
    nx: int
    how: str  # "gcc -O2, built in 0.21 s, cached", "library from the cache", ...

    def run(self, x0: np.ndarray, p: np.ndarray, tout: np.ndarray, rtol: float, atol: float) -> tuple[np.ndarray, dict]:
        """States at ``tout`` (len(tout) × nx) from ``x0`` at tout[0], and the counts; PdslError-free: raises
        ``RuntimeError`` with the reason when the integration stops."""
        x0 = np.ascontiguousarray(x0, dtype=float)
        p = np.ascontiguousarray(p, dtype=float)
        tout = np.ascontiguousarray(tout, dtype=float)
        X = np.empty((len(tout), self.nx))
        stats = (ctypes.c_long * 3)()
        t_fail = ctypes.c_double(0.0)
        dp = ctypes.POINTER(ctypes.c_double)
        rc = self.fn(x0.ctypes.data_as(dp), p.ctypes.data_as(dp), float(tout[0]), tout.ctypes.data_as(dp),
                     len(tout), float(rtol), float(atol), MAX_STEPS, X.ctypes.data_as(dp), stats,
                     ctypes.byref(t_fail))
        counts = {"nfevals": int(stats[0]), "nsteps": int(stats[1]), "nrejected": int(stats[2])}
        if rc:
            raise RuntimeError(f"at t = {t_fail.value:.6g}: {_FAILURES.get(rc, f'error {rc}')}")
        return X, counts

    def run_many(self, X0: np.ndarray, p: np.ndarray, tout: np.ndarray, rtol: float, atol: float,
                 threads: int = 1) -> list[tuple[np.ndarray, dict]]:
        if threads <= 1 or len(X0) == 1:
            return [self.run(x0, p, tout, rtol, atol) for x0 in X0]
        with ThreadPoolExecutor(max_workers=threads) as pool:  # ctypes releases the GIL during the call
            return list(pool.map(lambda x0: self.run(x0, p, tout, rtol, atol), X0))


def native_integrator(f: ca.Function, cache, key_objs: tuple = ()) -> NativeIntegrator:
    """The DOP853 library for ``f(t, x, p) -> xdot`` (named anything): from this process, the cache directory,
    or built now. ``key_objs``: objects whose identity stands for ``f`` (a repeated simulate skips the codegen)."""
    from ..numerics.dop853 import c_driver

    if key_objs:
        hit = _MADE.get(tuple(id(o) for o in key_objs))
        if hit is not None and all(a is b for a, b in zip(hit[0], key_objs)):
            return hit[1]
    cc = compiled.find_compiler()
    if cc is None:
        raise PdslError.at("BadOption", "--integrator dop853 is compiled C, and no C compiler was found ($CC, cc, gcc, clang)",
                           hint="install one (e.g. gcc), or use --integrator cvodes")
    ins = f.mx_in() if f.is_a("MXFunction") else f.sx_in()
    f = ca.Function(ENTRY, ins, f.call(ins))  # the entry point's name; the same graph
    nx, np_ = f.size1_in(1), f.size1_in(2)
    driver = c_driver(ENTRY, nx, np_)
    h = hashlib.sha256()
    for part in (f.serialize(), driver, str(cc), " ".join(FLAGS), ca.__version__):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    key = h.hexdigest()
    lib = compiled._loaded(key, cache, load=ctypes.CDLL, loaded=_LIBS)
    if lib is not None:
        how = "library built earlier in this process" if key in _LIBS else "library from the cache"
    else:
        started = time.perf_counter()
        try:
            src = ca.CodeGenerator("pdsl_dop853.c", {"with_header": False})
            src.add(f)
            lib = compiled._build(src.dump() + driver, key, cc, cache, FLAGS, load=ctypes.CDLL)
        except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
            raise PdslError.at("IntegratorFailure", f"dop853: building the C integrator failed: {compiled._short(exc)}",
                               hint="use --integrator cvodes") from None
        where = "cached" if compiled.library_path(cache, key) is not None else "not cached"
        how = f"{cc.rsplit('/', 1)[-1]} {FLAGS[0]}, built in {time.perf_counter() - started:.2f} s, {where}"
    _LIBS[key] = lib
    fn = lib.pdsl_dop853
    dp = ctypes.POINTER(ctypes.c_double)
    fn.restype = ctypes.c_int
    fn.argtypes = [dp, dp, ctypes.c_double, dp, ctypes.c_long, ctypes.c_double, ctypes.c_double, ctypes.c_long, dp,
                   ctypes.POINTER(ctypes.c_long), ctypes.POINTER(ctypes.c_double)]
    out = NativeIntegrator(fn=fn, nx=nx, how=how)
    if key_objs:
        if len(_MADE) >= 16:
            _MADE.pop(next(iter(_MADE)))
        _MADE[tuple(id(o) for o in key_objs)] = (key_objs, NativeIntegrator(fn, nx, "library built earlier in this process"))
    return out
