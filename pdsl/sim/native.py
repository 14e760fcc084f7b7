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
from ..backend import native_lib
from . import compiled

__all__ = ["NATIVE_INTEGRATORS", "NativeIntegrator", "native_integrator"]

NATIVE_INTEGRATORS = ("dop853",)
FLAGS = ("-O2", "-fPIC", "-shared")  # the driver's loops gain from -O2; the rhs is the same arithmetic either way
MAX_STEPS = 10_000_000  # towards one output time (the driver's max_steps)
ENTRY = "pdsl_f"
_FAILURES = {
    1: "too many steps towards one output time",
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
        stop = self.run_ctl(x0, p, tout, rtol, atol, new_ctl(self.nx))
        if stop.rc:
            raise RuntimeError(f"at t = {stop.t:.6g}: {_FAILURES.get(stop.rc, f'error {stop.rc}')}")
        return stop.X, stop.counts

    def run_ctl(self, x0, p, tout, rtol: float, atol: float, ctl: np.ndarray, max_steps: int = MAX_STEPS) -> "Stop":
        """One run with the driver's control vector ``ctl`` (pdsl.numerics.dop853: the starting step, the stiffness
        test; updated in place): where it stopped and why, never raising."""
        x0 = np.ascontiguousarray(x0, dtype=float)
        p = np.ascontiguousarray(p, dtype=float)
        tout = np.ascontiguousarray(tout, dtype=float)
        X = np.empty((len(tout), self.nx))
        stats = (ctypes.c_long * 3)()
        t_fail = ctypes.c_double(0.0)
        dp = ctypes.POINTER(ctypes.c_double)
        rc = self.fn(x0.ctypes.data_as(dp), p.ctypes.data_as(dp), float(tout[0]), tout.ctypes.data_as(dp),
                     len(tout), float(rtol), float(atol), int(max_steps), X.ctypes.data_as(dp), stats,
                     ctypes.byref(t_fail), ctl.ctypes.data_as(dp))
        counts = {"nfevals": int(stats[0]), "nsteps": int(stats[1]), "nrejected": int(stats[2])}
        return Stop.read(rc, t_fail.value, X, counts, ctl, self.nx)

    def run_many(self, X0: np.ndarray, p: np.ndarray, tout: np.ndarray, rtol: float, atol: float,
                 threads: int = 1) -> list[tuple[np.ndarray, dict]]:
        if threads <= 1 or len(X0) == 1:
            return [self.run(x0, p, tout, rtol, atol) for x0 in X0]
        with ThreadPoolExecutor(max_workers=threads) as pool:  # ctypes releases the GIL during the call
            return list(pool.map(lambda x0: self.run(x0, p, tout, rtol, atol), X0))


def native_integrator(f: ca.Function, cache, key_objs: tuple = (), *, build: bool = True,
                      nerr: int | None = None) -> NativeIntegrator | None:
    """The DOP853 library for ``f(t, x, p) -> xdot`` (named anything): from this process, the cache directory,
    or built now (``build=False``: None instead of a build). ``key_objs``: objects whose identity stands for ``f``
    (a repeated simulate skips the codegen); ``nerr``: the components under error control (the rest quadratures)."""
    from ..numerics.dop853 import c_driver

    if key_objs:
        hit = _MADE.get(tuple(id(o) for o in key_objs))
        if hit is not None and all(a is b for a, b in zip(hit[0], key_objs)):
            return hit[1]
    cc = native_lib.find_compiler()
    if cc is None:
        if not build:
            return None
        raise PdslError.at("BadOption", "--integrator dop853 is compiled C, and no C compiler was found ($CC, cc, gcc, clang)",
                           hint="install one (e.g. gcc), or use --integrator cvodes")
    ins = f.mx_in() if f.is_a("MXFunction") else f.sx_in()
    f = ca.Function(ENTRY, ins, f.call(ins))  # the entry point's name; the same graph
    nx, np_ = f.size1_in(1), f.size1_in(2)
    driver = c_driver(ENTRY, nx, np_, nerr)
    h = hashlib.sha256()
    for part in (f.serialize(), driver, str(cc), " ".join(FLAGS), ca.__version__):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    key = h.hexdigest()
    lib = native_lib.load_cached(key, cache, ctypes.CDLL, _LIBS)
    if lib is not None:
        how = "library built earlier in this process" if key in _LIBS else "library from the cache"
    elif not build:
        return None
    else:
        started = time.perf_counter()
        try:
            src = ca.CodeGenerator("pdsl_dop853.c", {"with_header": False})
            src.add(f)
            lib = native_lib.build(src.dump() + driver, key, cc, cache, FLAGS, ctypes.CDLL)
        except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
            raise PdslError.at("IntegratorFailure", f"dop853: building the C integrator failed: {compiled._short(exc)}",
                               hint="use --integrator cvodes") from None
        where = "cached" if native_lib.library_path(cache, key) is not None else "not cached"
        how = f"{cc.rsplit('/', 1)[-1]} {FLAGS[0]}, built in {time.perf_counter() - started:.2f} s, {where}"
    _LIBS[key] = lib
    fn = lib.pdsl_dop853
    dp = ctypes.POINTER(ctypes.c_double)
    fn.restype = ctypes.c_int
    fn.argtypes = [dp, dp, ctypes.c_double, dp, ctypes.c_long, ctypes.c_double, ctypes.c_double, ctypes.c_long, dp,
                   ctypes.POINTER(ctypes.c_long), ctypes.POINTER(ctypes.c_double), dp]
    out = NativeIntegrator(fn=fn, nx=nx, how=how)
    if key_objs:
        if len(_MADE) >= 16:
            _MADE.pop(next(iter(_MADE)))
        _MADE[tuple(id(o) for o in key_objs)] = (key_objs, NativeIntegrator(fn, nx, "library built earlier in this process"))
    return out


def new_ctl(nx: int, *, stiff_after: int = 0, h: float = 0.0, iasti: int = 0, nonsti: int = 0) -> np.ndarray:
    """The driver's control vector (pdsl.numerics.dop853, ``CTL_*``): a fresh run, or one resumed with ``h``."""
    from ..numerics import dop853 as D

    ctl = np.zeros(D.ctl_size(nx))
    ctl[D.CTL_H], ctl[D.CTL_STIFF_AFTER], ctl[D.CTL_IASTI], ctl[D.CTL_NONSTI] = h, stiff_after, iasti, nonsti
    return ctl


@dataclass
class Stop:
    """Where a run stopped: ``rc`` 0 (every output written), else the driver's code (1 … 5, 5: stiff); ``rows``
    outputs written (X[:rows]); ``t``, ``y`` the end of the last accepted step; ``h`` the step size it would take
    next; ``hlamb`` the last h·|λ| above the stability boundary (0 when none)."""

    rc: int
    X: np.ndarray
    rows: int
    t: float
    y: np.ndarray
    h: float
    hlamb: float
    counts: dict
    handover_t: float | None = None  # VmDop853: where the C driver took over

    @classmethod
    def read(cls, rc: int, t: float, X: np.ndarray, counts: dict, ctl: np.ndarray, nx: int) -> "Stop":
        from ..numerics import dop853 as D

        return cls(rc=int(rc), X=X, rows=int(ctl[D.CTL_ROWS]), t=float(t), y=np.array(ctl[D.CTL_Y:D.CTL_Y + nx]),
                   h=float(ctl[D.CTL_H]), hlamb=float(ctl[D.CTL_HLAMB]), counts=counts)

    @property
    def why(self) -> str:
        return _FAILURES.get(self.rc, f"error {self.rc}") if self.rc != 5 else "stiff"


class VmDop853:
    """The compiled driver's method, run from Python over CasADi's VM: no C compiler, no build.

    Each step attempt is one call of a CasADi Function (the eleven stages, the new point, f there, the error sums
    and the stiffness test's sums; called through a ``FunctionBuffer`` on numpy memory, ~2 µs for the double
    pendulum), the dense output one more call per step with outputs, the step-size control in Python. Every
    operation is the C driver's (:func:`pdsl.numerics.dop853.c_driver`) in the same order — sums accumulated in
    the same order in the graph, the control's scalar arithmetic in IEEE doubles, ``pow`` and ``sqrt`` from the
    same libm — so the two take the same steps and give the same trajectory to the last bit (tested), which is
    what lets ``--integrator auto`` run here when no library is at hand and still write the bytes a cached run
    writes. ``handover(t, t0, t_end)`` (optional) is asked every :data:`HANDOVER_EVERY` steps whether to continue
    in C: it returns a :class:`NativeIntegrator` (built now) or None; the C driver resumes from the step's end with
    the step size and stiffness counters of this run (the same steps again)."""

    HANDOVER_EVERY = 128
    SX_INSTRUCTIONS_MAX = 2_000

    def __init__(self, f: ca.Function, nerr: int | None = None):
        from ..numerics import dop853 as D

        # SX (f inlined: the fastest VM code) for a small right-hand side; MX (f called 16 times, vector operations
        # as single nodes) for a network or a large one, where an inlined graph costs seconds to build
        mx = f.is_a("MXFunction") or f.n_instructions() > self.SX_INSTRUCTIONS_MAX
        T = ca.MX if mx else ca.SX
        nx, np_ = f.size1_in(1), f.size1_in(2)
        nerr = nx if nerr is None else nerr
        self.nx, self.np, self.nerr = nx, np_, nerr
        t, h, rtol, atol = T.sym("t"), T.sym("h"), T.sym("rtol"), T.sym("atol")
        y, p, k0 = T.sym("y", nx), T.sym("p", np_), T.sym("k0", nx)

        # vectors, element by element: every entry is the C driver's scalar arithmetic in the driver's order. The
        # tableau's numbers (and the 0 every sum starts from, and the 2 of the interpolant) are symbols fed at run
        # time, never constants: CasADi folds constants into the graph (c₁·(c₂·x) → (c₁c₂)·x, 0 + x → x), which would
        # change the last bits; the tableau's zeros are left out of every sum, as the C driver skips them
        values: list[float] = []
        index: dict = {}
        for key, v in [("0", 0.0), ("2", 2.0), *[(("C", s), v) for s, v in enumerate(D.C)],
                       *[(("A", s, j), v) for s, row in enumerate(D.A) for j, v in enumerate(row)],
                       *[(("B", j), v) for j, v in enumerate(D.B)], *[(("E5", j), v) for j, v in enumerate(D.E5)],
                       *[(("E3", j), v) for j, v in enumerate(D.E3)],
                       *[(("D", s, j), v) for s, row in enumerate(D.D) for j, v in enumerate(row)]]:
            index[key] = len(values)
            values.append(float(v))
        tab = T.sym("tableau", len(values))
        cells = ca.vertsplit(tab)  # the entries once (an index into tab per use is a call into CasADi each)

        def c(*key):
            return cells[index[key if len(key) > 1 else key[0]]]

        def dot(terms):  # Σ_j K_j·w_j over the nonzero weights, from 0, in order: the driver's `acc += …` loop
            terms = [(k, w) for k, w in terms if values[index[w]] != 0.0]
            if not mx and terms:  # one multiply-accumulate: ((0 + K_a·w_a) + K_b·w_b) + …, the loop's graph exactly
                weights = tab[[index[w] for _, w in terms]]
                return ca.mac(ca.horzcat(*(k for k, _ in terms)), weights, ca.repmat(c("0"), terms[0][0].size1(), 1))
            acc = c("0")
            for k, w in terms:
                acc = acc + k * c(*w)
            return acc

        K = [k0]
        tmp = y
        for s in range(1, D.N_STAGES):  # pd_stages: acc = Σ_j K_j a_sj, tmp = y + acc·h
            tmp = y + dot([(K[j], ("A", s, j)) for j in range(s)]) * h
            K.append(f(t + c("C", s) * h, tmp, p))
        yn = y + h * dot([(K[j], ("B", j)) for j in range(D.N_STAGES)])
        K.append(f(t + h, yn, p))  # K[12] = f(t + h, y_new); tmp: stage 11's point
        a5 = dot([(K[j], ("E5", j)) for j in range(D.N_STAGES + 1)])
        a3 = dot([(K[j], ("E3", j)) for j in range(D.N_STAGES + 1)])
        scale = atol + ca.fmax(ca.fabs(y), ca.fabs(yn)) * rtol
        a5, a3 = a5 / scale, a3 / scale
        st_a, st_b = K[D.N_STAGES] - K[D.N_STAGES - 1], yn - tmp
        if mx:  # casadi_dot: r = 0; r += x_i·y_i for i in order, the driver's loop
            e5, e3, stnum, stden = (ca.dot(v[:nerr], v[:nerr]) for v in (a5, a3, st_a, st_b))
        else:
            # the sums over the components (those under error control), in order: ((0 + v₀·v₀) + v₁·v₁) + …
            e5, e3, stnum, stden = (ca.mac(v[:nerr].T, v[:nerr], c("0")) for v in (a5, a3, st_a, st_b))
        ins = ca.vertcat(t, h, rtol, atol, y, p, k0)
        outs = ca.vertcat(yn, *K[1:], e5, e3, stnum, stden)
        self._attempt = self._buffered(ca.Function("dop853_attempt", [ins, tab], [outs]), values)
        # the dense output: stages 13 … 15 and the interpolant's 7 coefficient rows (the driver's F)
        kin = T.sym("K", (D.N_STAGES + 1) * nx)
        ynin = T.sym("yn", nx)
        Kd = [kin[j * nx:(j + 1) * nx] for j in range(D.N_STAGES + 1)]
        for s in range(D.N_STAGES + 1, D.N_STAGES_EXTENDED):
            Kd.append(f(t + c("C", s) * h, y + dot([(Kd[j], ("A", s, j)) for j in range(s)]) * h, p))
        dy = ynin - y
        rows = [dy, h * Kd[0] - dy, c("2") * dy - h * (Kd[D.N_STAGES] + Kd[0])]
        for s in range(4):
            rows.append(h * dot([(Kd[j], ("D", s, j)) for j in range(D.N_STAGES_EXTENDED)]))
        self._dense = self._buffered(ca.Function("dop853_dense", [ca.vertcat(t, h, y, ynin, p, kin), tab],
                                                 [ca.vertcat(*rows)]), values)
        tt, xx, pp = T.sym("t"), T.sym("x", nx), T.sym("p", np_)
        self._f = self._buffered(ca.Function("dop853_f", [ca.vertcat(tt, xx, pp)], [f(tt, xx, pp)]))

    @staticmethod
    def _buffered(fn: ca.Function, tableau=None):
        """(input array, output array, evaluate()): ``fn`` called on numpy memory, no conversions; its second input,
        if any, the tableau's numbers, set once."""
        a, r = np.zeros(fn.size1_in(0)), np.zeros(fn.size1_out(0))
        buf, ev = fn.buffer()
        buf.set_arg(0, memoryview(a))
        buf.set_res(0, memoryview(r))
        keep = [buf]
        if tableau is not None:
            tab = np.array(tableau, dtype=float)
            buf.set_arg(1, memoryview(tab))
            keep.append(tab)
        return a, r, ev, keep  # kept alive with the memory the buffer points at

    def run(self, x0, p, tout, rtol: float, atol: float) -> tuple[np.ndarray, dict]:
        stop = self.run_ctl(x0, p, tout, rtol, atol, new_ctl(self.nx))
        if stop.rc:
            raise RuntimeError(f"at t = {stop.t:.6g}: {stop.why}")
        return stop.X, stop.counts

    def run_ctl(self, x0, p, tout, rtol: float, atol: float, ctl: np.ndarray, max_steps: int = MAX_STEPS,
                handover=None) -> Stop:
        """:meth:`NativeIntegrator.run_ctl` (the same steps, the same numbers), with the hand-over to C."""
        import math

        from ..numerics import dop853 as D

        nx = self.nx
        tout = np.ascontiguousarray(tout, dtype=float)
        nout = len(tout)
        X = np.empty((nout, nx))
        t0 = float(tout[0])
        y = np.array(x0, dtype=float)
        p = np.asarray(p, dtype=float)
        stiff_after, iasti, nonsti = int(ctl[D.CTL_STIFF_AFTER]), int(ctl[D.CTL_IASTI]), int(ctl[D.CTL_NONSTI])
        nfev = nacc = nrej = since = 0
        io = 0
        while io < nout and tout[io] <= t0:
            X[io] = y
            io += 1
        t, h_abs, rc = t0, 0.0, 0
        dense: list = []  # (first output, last output + 1, t, h, y, F) of the steps with outputs

        def finish(rc_, t_):
            self._interpolate(X, tout, dense)
            ctl[D.CTL_H], ctl[D.CTL_IASTI], ctl[D.CTL_NONSTI], ctl[D.CTL_ROWS] = h_abs, iasti, nonsti, io
            ctl[D.CTL_Y:D.CTL_Y + nx] = y
            return Stop.read(rc_, t_, X, {"nfevals": nfev, "nsteps": nacc, "nrejected": nrej}, ctl, nx)

        if io >= nout:
            return finish(0, t)
        t_bound = float(tout[-1])
        fa, fr, fev, _ = self._f
        fa[0], fa[1:1 + nx], fa[1 + nx:] = t, y, p
        fev()
        nfev += 1
        k0 = fr.copy()
        if not np.all(np.isfinite(k0)):
            return finish(3, t)
        if ctl[D.CTL_H] > 0.0:
            h_abs = float(ctl[D.CTL_H])
        else:  # Hairer's starting step, as the C driver computes it
            sc = [atol + abs(float(v)) * rtol for v in y[:self.nerr]]
            d0, d1 = _rms(y, sc), _rms(k0, sc)
            h0 = 1e-6 if (d0 < 1e-5 or d1 < 1e-5) else 0.01 * d0 / d1
            if h0 > t_bound - t0:
                h0 = t_bound - t0
            fa[0], fa[1:1 + nx] = t0 + h0, y + h0 * k0
            fev()
            nfev += 1
            if not np.all(np.isfinite(fr)):
                return finish(3, t)
            d2 = _rms(fr - k0, sc) / h0
            dmax = d1 if d1 > d2 else d2
            h1 = (h0 * 1e-3 if h0 * 1e-3 > 1e-6 else 1e-6) if (d1 <= 1e-15 and d2 <= 1e-15) else \
                (0.01 / dmax) ** (1.0 / (D.ORDER_FOR_START + 1))
            h_abs = 100 * h0
            if h1 < h_abs:
                h_abs = h1
            if t_bound - t0 < h_abs:
                h_abs = t_bound - t0
        aa, ar, aev, _ = self._attempt
        aa[2], aa[3], aa[4 + nx:4 + nx + self.np] = rtol, atol, p
        n_k = (D.N_STAGES + 1) * nx
        while io < nout:
            min_step = 10 * abs(math.nextafter(t, math.inf) - t)
            accepted = rejected = False
            if h_abs < min_step:
                h_abs = min_step
            while not accepted:
                if h_abs < min_step:
                    return finish(2, t)
                h = h_abs
                t_new = t + h
                if t_new > t_bound:
                    t_new = t_bound
                h = t_new - t
                h_abs = abs(h)
                aa[0], aa[1], aa[4:4 + nx], aa[4 + nx + self.np:] = t, h, y, k0
                aev()
                nfev += 12
                if not np.isfinite(ar[:n_k]).all():  # a rejected step, as in the C driver
                    h_abs *= D.MIN_FACTOR
                    rejected = True
                    nrej += 1
                    continue
                e5, e3 = float(ar[-4]), float(ar[-3])
                err_norm = 0.0 if (e5 == 0.0 and e3 == 0.0) else h_abs * e5 / math.sqrt((e5 + 0.01 * e3) * self.nerr)
                if err_norm < 1.0:
                    factor = D.MAX_FACTOR if err_norm == 0.0 else D.SAFETY * err_norm ** D.ERROR_EXPONENT
                    if factor > D.MAX_FACTOR:
                        factor = D.MAX_FACTOR
                    if rejected and factor > 1.0:
                        factor = 1.0
                    h_abs *= factor
                    accepted = True
                else:
                    factor = D.SAFETY * err_norm ** D.ERROR_EXPONENT
                    h_abs *= factor if factor > D.MIN_FACTOR else D.MIN_FACTOR
                    rejected = True
                    nrej += 1
            nacc += 1
            since += 1
            stiff = False
            if stiff_after > 0:
                stnum, stden = float(ar[-2]), float(ar[-1])
                if stden > 0.0 and abs(h) * math.sqrt(stnum / stden) > D.STIFF_H_LAMBDA:
                    ctl[D.CTL_HLAMB] = abs(h) * math.sqrt(stnum / stden)
                    nonsti = 0
                    iasti += 1
                    stiff = iasti >= stiff_after
                else:
                    nonsti += 1
                    if nonsti == D.NONSTIFF_RESET:
                        iasti = 0
            yn = ar[:nx].copy()
            if tout[io] <= t_new:
                first = io
                since = 0
                while io < nout and tout[io] <= t_new:
                    io += 1
                da, dr, dev, _ = self._dense
                da[0], da[1], da[2:2 + nx], da[2 + nx:2 + 2 * nx] = t, h, y, yn
                da[2 + 2 * nx:2 + 2 * nx + self.np] = p
                da[2 + 2 * nx + self.np:2 + 2 * nx + self.np + nx] = k0
                da[2 + 3 * nx + self.np:] = ar[nx:nx + D.N_STAGES * nx]
                dev()
                nfev += 3
                dense.append((first, io, t, h, y, dr.reshape(7, nx).copy()))
            t = t_new
            y = yn
            k0 = ar[nx + (D.N_STAGES - 1) * nx:nx + D.N_STAGES * nx].copy()
            if io < nout and stiff:
                return finish(5, t)
            if io < nout and since >= max_steps:
                return finish(1, t)
            if handover is not None and io < nout and nacc % self.HANDOVER_EVERY == 0:
                nat = handover(t, t0, t_bound)
                if nat is not None:  # the rest in C, from this step's end with this run's step size and counters
                    rest = np.concatenate([[t], tout[io:]])
                    c2 = new_ctl(nx, stiff_after=stiff_after, h=h_abs, iasti=iasti, nonsti=nonsti)
                    more = nat.run_ctl(y, p, rest, rtol, atol, c2, max_steps)
                    self._interpolate(X, tout, dense)
                    X[io:io + max(more.rows - 1, 0)] = more.X[1:more.rows]
                    ctl[:] = c2
                    ctl[D.CTL_ROWS] = io + max(more.rows - 1, 0)
                    counts = {k: v + more.counts[k] for k, v in
                              {"nfevals": nfev, "nsteps": nacc, "nrejected": nrej}.items()}
                    return Stop(rc=more.rc, X=X, rows=int(ctl[D.CTL_ROWS]), t=more.t, y=more.y, h=more.h,
                                hlamb=more.hlamb, counts=counts, handover_t=t)
        return finish(0, t)

    @staticmethod
    def _interpolate(X, tout, dense) -> None:
        """The outputs of the steps in ``dense``, all at once: the driver's evaluation of the interpolant
        (v += F_{6−s}; v *= x or 1 − x; X = v + y), element by element the same operations."""
        if not dense:
            return
        idx = np.concatenate([np.arange(a, b) for a, b, *_ in dense])
        step = np.repeat(np.arange(len(dense)), [b - a for a, b, *_ in dense])  # the step of each output
        ts, hs = np.array([d[2] for d in dense])[step], np.array([d[3] for d in dense])[step]
        Y, F = np.array([d[4] for d in dense]), np.array([d[5] for d in dense])  # (steps, nx), (steps, 7, nx)
        x = ((tout[idx] - ts) / hs)[:, None]
        v = np.zeros((len(idx), Y.shape[1]))
        for s in range(7):
            v = v + F[step, 6 - s]
            v = v * (x if s % 2 == 0 else 1 - x)
        X[idx] = v + Y[step]
        dense.clear()


def _rms(v, scale) -> float:
    """The driver's pd_rms: √(Σ (v_i/scale_i)² / nx), summed in order."""
    import math

    s = 0.0
    for a, b in zip(v, scale):
        r = float(a) / b
        s += r * r
    return math.sqrt(s / len(scale))
