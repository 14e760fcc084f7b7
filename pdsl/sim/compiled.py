"""A compiled right-hand side for CVODES/IDAS: the integrator's functions as C, built once, cached.

CasADi evaluates the functions an integrator calls (``daeF``: the right-hand side, ``jacF``: its Jacobian
for the Newton iteration) in its SX virtual machine. :func:`integrator` instead generates C for exactly those
functions (CasADi's code generator), compiles them into a shared object with the system's C compiler and
hands CVODES/IDAS that library (``casadi.external``: CasADi looks the functions up by name). The arithmetic
is the same operations in the same order (no ``-ffast-math``, no ``-march``): the trajectory is bit-identical
to the VM's (tested).

The shared object is cached like the compiled model (:mod:`pdsl.cache`): ``<cache dir>/rhs-<sha256>.so``, the
key a hash of the graph the functions are made from (the integrator's oracle, serialised once; never the derived
Jacobian, :func:`_key`), the integrator options that shape them, the compiler and its flags; atomic writes.
A library whose predicted build exceeds :data:`BUILD_S_MAX` is not built (the VM runs, and the report says why),
and a build predicted to take more than :data:`PROGRESS_S` says so on standard error (:func:`progress`). The C is compiled in a private
work directory (``$TMPDIR/pdsl-cc-<pid>-<hex>``, 0700, locked while the build runs; an abandoned one, left by a
killed run, is removed by the next build); the library's bytes then go into the cache with a MAC
(:meth:`pdsl.cache.ModelCache.store_library`), and a cached library is loaded only after its bytes are
authenticated, through the verified descriptor (:meth:`~pdsl.cache.ModelCache.load_library`): a planted,
truncated or foreign library is never ``dlopen``-ed, it is removed and rebuilt. With no cache (``--no-cache``,
``PDSL_NO_CACHE=1``, library calls without one, a refused cache directory) it is built in the work directory
and kept for this process only. A second run of an unchanged model loads it (~1 ms) and pays no compile.

**The choice** (``compile="auto"``, ``pdsl simulate --compile auto|yes|no``):

* ``no``, or no C compiler found (``$CC``, else ``cc``/``gcc``/``clang`` on the PATH), or a model with networks
  (MX): the VM. A compiler that fails also falls back to the VM; the report says so.
* a library already built for this right-hand side (this process, or the cache directory): compiled.
* ``yes``: compile (and cache) now.
* ``auto`` otherwise: compile when the predicted saving exceeds the predicted build time. A *probe* (the VM
  integrator from the start over 1/1024 of the horizon, ×4 until it takes 50 steps, at most 1/32 of the
  horizon or 200 steps; discarded) counts the rhs and Jacobian evaluations, extrapolated to the horizon; the
  saving per evaluation is :data:`NS_SAVED_PER_INSTRUCTION` per VM instruction of the function (counted up to
  :data:`SAVING_INSTRUCTIONS_MAX`: a larger function runs no faster compiled), the build
  :data:`BUILD_S_FIXED` + :data:`BUILD_S_PER_INSTRUCTION` per instruction (both measured, docs/simulate.md).
  The break-even is ~60,000 evaluations whatever the model's size (both sides grow with the instruction
  count), so a first run rarely compiles on its own; ``--compile yes`` builds the library once and every later
  run uses it. The rule is deliberately conservative: the 5-link chain saves ~9 µs per evaluation inside
  CVODES (the rule assumes 1.6 µs), Cucker–Smale N = 100 almost nothing (libm-bound).

The measurements behind the constants (gcc 12, -O1, this machine): 5-link chain rhs 645 instructions,
VM 4.7 µs vs C 2.0 µs per call, Jacobian 5142 instructions 19.8 µs vs 6.2 µs, build 0.55 s; double pendulum
rhs 78 instructions 1.0 µs vs 0.84 µs; Cucker–Smale N = 100 rhs 198,409 instructions 0.76 ms vs 0.73 ms
(libm-bound: 30,000 pow/exp per call), build 36 s.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import casadi as ca

from ..backend import native_lib
from ..backend.native_lib import WORK_PREFIX, find_compiler, library_path  # noqa: F401 - this module's names too

__all__ = ["COMPILE_MODES", "RhsPlan", "find_compiler", "FLAGS"]

COMPILE_MODES = ("auto", "yes", "no")
FLAGS = ("-O1", "-fPIC", "-shared")  # -O1: -O2 builds ~1.5× slower for the same speed here (measured)
NS_SAVED_PER_INSTRUCTION = 2.5  # VM − C per instruction and evaluation (chain: 4.2 rhs, 2.6 Jacobian; CS ~0)
# ... counted for at most this many instructions of a function: a large one runs no faster compiled (Cucker–Smale
# N = 100, 198,409 instructions: 0.76 ms VM, 0.73 ms C, bound by libm and by its 1.6 MB work vector)
SAVING_INSTRUCTIONS_MAX = 20_000
BUILD_S_FIXED = 0.15  # compiler start-up, codegen, load
BUILD_S_PER_INSTRUCTION = 1.5e-4  # gcc -O1 on CasADi's straight-line C (0.95e-4 … 1.8e-4 measured)
PROBE_FRACTION = 1.0 / 32
PROBE_STEPS = 200
# no probe when building the VM integrator took longer than this: the probe's own integrator would cost as much
# again (Cucker–Smale N = 100: 6.8 s, mostly CasADi's symbolic Jacobian, which CVODES' setup builds even for
# functional iteration); auto then keeps the VM
PROBE_BUILD_MAX_S = 1.0
JAC_PLACEHOLDER_ABOVE = 20_000  # functional iteration never calls jacF: a NaN placeholder instead of a big one
# the grid functions (energy, power, ...) run once per output sample: compiled only while they build in seconds
# (RLC ladder N = 1000: 40,000 instructions, a build of minutes for a saving of milliseconds)
GRID_INSTRUCTIONS_MAX = 20_000
# a library whose predicted build (BUILD_S_FIXED + BUILD_S_PER_INSTRUCTION per instruction) exceeds this is not
# built, whatever --compile says: the VM runs it and the report says why (~800,000 instructions; Cucker–Smale
# N = 100, 198,409, builds in 36 s)
BUILD_S_MAX = 120.0
PROGRESS_S = 2.0  # a stage predicted (or found) to take longer than this says so on standard error (progress)

_LOADED: dict[str, ca.Importer] = {}  # key -> loaded library (this process)
_BUILDS: list = [0]  # libraries built in this process (a VM choice of ``auto`` is revisited after one)
_GRID: dict = {}  # identities of grid functions -> (them, their compiled versions)


def progress(text: str) -> None:
    """One line on standard error while a long stage runs (``pdsl: compiling ...``): the run is not hung. pdsl's
    own write: it reaches the terminal inside a captured solver call too (pdsl.quiet)."""
    import sys

    print(f"pdsl: {text}", file=sys.stderr, flush=True)


def generation() -> int:
    return _BUILDS[0]


@dataclass
class RhsPlan:
    """How one simulate call evaluates its right-hand side; filled in by the first integrator it builds."""

    mode: str = "auto"
    cache: object = None  # a pdsl.cache.ModelCache, or None (temporary build)
    compiled: bool | None = None  # None: not decided yet
    reason: str = ""
    build_s: float = 0.0

    def describe(self) -> str:
        if self.compiled is None:
            return "vm"
        return ("compiled C" if self.compiled else "CasADi VM") + (f" ({self.reason})" if self.reason else "")

    # ------------------------------------------------------------------ the integrator
    def integrator(self, F0: ca.Function, plugin: str, t0: float, tout: list[float], opts: dict, probe,
                   built_s: float = 0.0) -> ca.Function:
        """``F0`` (the VM integrator, built from SX) or the same integrator on a compiled library.

        ``probe(F)`` runs the VM integrator ``F`` from the start values: ``(stats, stopped at max_num_steps)``."""
        if self.compiled is False:
            return F0
        if self.compiled is None:
            why = self._unavailable(F0)
            if why:
                self._decide(False, why)
                return F0
        funcs = _library_functions(F0, opts)
        size = {f.name(): f.n_instructions() for f in funcs}
        predicted = BUILD_S_FIXED + BUILD_S_PER_INSTRUCTION * sum(size.values())
        if predicted > BUILD_S_MAX:  # never reached by a model built in reasonable time; stays with the VM
            parts = ", ".join(f"{k} {v:,}" for k, v in size.items() if v)
            self._decide(False, f"not compiled: {sum(size.values()):,} instructions ({parts}) would take a C build "
                                f"of ~{_duration(predicted)}, more than {BUILD_S_MAX:g} s")
            return F0
        cc = find_compiler()
        key = _key(funcs, cc, F0.oracle(), {**opts, "plugin": plugin})
        imp = _loaded(key, self.cache)
        if imp is None:
            if self.compiled is None and self.mode == "auto":
                ok, why = self._worth(F0, funcs, plugin, t0, tout, opts, probe, built_s)
                if not ok:
                    self._decide(False, why)
                    return F0
                self.reason = why
            if predicted > PROGRESS_S:
                progress(f"compiling the right-hand side to C: {sum(size.values()):,} instructions, "
                         f"~{_duration(predicted)} ({'cached for later runs' if self.cache is not None else 'not cached'})")
            t = time.perf_counter()
            try:
                imp = _build(_source(funcs), key, cc, self.cache)
            except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
                self._decide(False, f"the C build failed, {_short(exc)}")
                return F0
            self.build_s += time.perf_counter() - t
            _BUILDS[0] += 1
            where = "cached" if library_path(self.cache, key) is not None else "not cached"
            self._decide(True, f"{Path(cc).name} {FLAGS[0]}, built in {self.build_s:.2f} s, {where}"
                         + (f"; {self.reason}" if self.reason and self.mode == "auto" else ""))
        elif self.compiled is None:
            self._decide(True, "library from the cache" if self.cache is not None and key not in _LOADED
                         else "library built earlier in this process")
        _LOADED[key] = imp
        return ca.integrator(F0.name(), plugin, ca.external(funcs[0].name(), imp), t0, tout, opts)

    # ------------------------------------------------------------------ the functions evaluated on the output grid
    def grid_functions(self, fns: dict) -> dict:
        """``fns`` (name -> Function or None: energy, power, outputs, ...) from a compiled library when this run's
        right-hand side is compiled (one more library, built once and cached the same way), else as given."""
        if not self.compiled:
            return fns
        todo = {k: f for k, f in fns.items() if f is not None and f.is_a("SXFunction") and f.n_instructions() > 0}
        if not todo or sum(f.n_instructions() for f in todo.values()) > GRID_INSTRUCTIONS_MAX:
            return fns
        ids = tuple((k, id(f)) for k, f in todo.items())
        hit = _GRID.get(ids)
        if hit is not None and all(hit[0][k] is f for k, f in todo.items()):
            return {**fns, **hit[1]}
        funcs = list(todo.values())
        cc = find_compiler()
        key = _key(funcs, cc)
        imp = _loaded(key, self.cache)
        if imp is None:
            try:
                imp = _build(_source(funcs), key, cc, self.cache)
            except (OSError, subprocess.SubprocessError, RuntimeError):
                return fns
        _LOADED[key] = imp
        out = {k: ca.external(f.name(), imp) for k, f in todo.items()}
        if len(_GRID) >= 32:
            _GRID.pop(next(iter(_GRID)))
        _GRID[ids] = (todo, out)
        return {**fns, **out}

    def _decide(self, compiled: bool, reason: str) -> None:
        if self.compiled is None:
            self.compiled, self.reason = compiled, reason

    def _unavailable(self, F0) -> str:
        if self.mode == "no":
            return "--compile no"
        if not F0.oracle().is_a("SXFunction"):
            return "a model with networks (MX) is evaluated by CasADi"
        if find_compiler() is None:
            return "no C compiler found ($CC, cc, gcc, clang)"
        return ""

    def _worth(self, F0, funcs, plugin, t0, tout, opts, probe, built_s: float = 0.0) -> tuple[bool, str]:
        """Predicted saving of this run against the predicted build time (the probe counts evaluations).

        The probe integrates from the start over a span h, first 1/1024 of the horizon H, ×4 while it took fewer
        than PROBE_STEPS/4 steps, at most H·PROBE_FRACTION; the counts are scaled by H/h. One integrator serves
        every span: it runs in the scaled time s = (t − t0)/h, dx/ds = h·f (the same steps, up to rounding)."""
        if built_s > PROBE_BUILD_MAX_S:
            return False, (f"no probe: building the integrator took {built_s:.2g} s and a probe would cost as much "
                           "again; --compile yes builds the library once for later runs")
        horizon = tout[-1] - t0
        Fp = _scaled_probe(F0.oracle(), plugin, t0, {**opts, "max_num_steps": PROBE_STEPS,
                                                       "disable_internal_warnings": True})
        span = horizon / 1024
        while True:
            stats, capped = probe(Fp, span)
            if capped or stats.get("nsteps", 0) >= PROBE_STEPS / 4 or span >= horizon * PROBE_FRACTION:
                break
            span = min(4 * span, horizon * PROBE_FRACTION)
        scale = horizon / span
        if capped:  # stopped after PROBE_STEPS steps inside the span: at least that many per span
            stats = {"nsteps": PROBE_STEPS, "nfevals": max(stats.get("nfevals", 0), PROBE_STEPS),
                     "nlinsetups": stats.get("nlinsetups", 0)}
        n_rhs = int(stats.get("nfevals", 0) or 0) * scale
        n_jac = int(stats.get("nlinsetups", 0) or 0) * scale
        instr = {f.name(): f.n_instructions() for f in funcs}
        counted = {k: min(v, SAVING_INSTRUCTIONS_MAX) for k, v in instr.items()}
        saving = 1e-9 * NS_SAVED_PER_INSTRUCTION * (n_rhs * counted.get("daeF", 0) + n_jac * counted.get("jacF", 0))
        build = BUILD_S_FIXED + BUILD_S_PER_INSTRUCTION * sum(instr.values())
        more = "≥ " if capped else "~"
        text = (f"{more}{n_rhs:,.0f} rhs evaluations predicted, saving {more}{_duration(saving)} against a "
                f"~{_duration(build)} build")
        if saving > build:
            return True, text
        return False, text + "; --compile yes builds it once for later runs"


def _scaled_probe(oracle: ca.Function, plugin: str, t0: float, opts: dict) -> ca.Function:
    """The integrator of ``oracle`` over s ∈ [0, 1] with t = t0 + s·h, h the last parameter."""
    args = [ca.SX.sym(oracle.name_in(i), oracle.sparsity_in(i)) for i in range(oracle.n_in())]
    t, x, z, p, u = args
    h = ca.SX.sym("h")
    out = oracle(t0 + t * h, x, z, p, u)
    dae = {"t": t, "x": x, "p": ca.vertcat(p, h), "ode": h * out[0]}
    if z.numel():
        dae.update({"z": z, "alg": out[1]})
    if u.numel():
        dae["u"] = u
    return ca.integrator("probe", plugin, dae, 0.0, [1.0], opts)


def _library_functions(F0: ca.Function, opts: dict) -> list[ca.Function]:
    """The oracle (its name is the library's entry point) and the functions the integrator creates from it.

    CVODES/IDAS evaluate ``daeF`` and ``jacF``, never the oracle itself (its call count stays 0): a large oracle
    goes in as a placeholder (it would double the C of a large model), and so does a large ``jacF`` under
    functional iteration, which needs no Jacobian. A placeholder returns NaN: were it ever called, the
    integrator would stop with an error, not go on with wrong numbers."""
    oracle = F0.oracle()
    funcs = [_placeholder(oracle) if oracle.n_instructions() > JAC_PLACEHOLDER_ABOVE else oracle]
    for name in F0.get_function():
        if name == funcs[0].name():
            continue
        f = F0.get_function(name)
        if (name == "jacF" and opts.get("nonlinear_solver_iteration") == "functional"
                and f.n_instructions() > JAC_PLACEHOLDER_ABOVE):
            f = _placeholder(f)
        funcs.append(f)
    return funcs


def _placeholder(f: ca.Function) -> ca.Function:
    """``f``'s signature and sparsity, NaN values: for a function the integrator builds but never calls."""
    args = [ca.SX.sym(f.name_in(i), f.sparsity_in(i)) for i in range(f.n_in())]
    outs = [ca.SX(ca.DM(f.sparsity_out(i), float("nan"))) for i in range(f.n_out())]
    return ca.Function(f.name(), args, outs, f.name_in(), f.name_out())


def _source(funcs: list[ca.Function]) -> str:
    cg = ca.CodeGenerator("pdsl_rhs.c", {"with_header": False})
    for f in funcs:
        cg.add(f)
    return cg.dump()


def _key(funcs: list[ca.Function], cc: str | None, source: ca.Function | None = None, opts: dict | None = None) -> str:
    """sha256 of what the library is made of, with the compiler, its flags and CasADi's version: cheap whatever the
    size of the functions.

    The integrator's functions (``daeF``, ``jacF``, ...) are made by CasADi from one graph, the integrator's oracle
    (``source``: the model's right-hand side), and the integrator options that shape them: that graph's
    serialisation is hashed once, with the options and, per function, its name, size and signature (a guard).
    The derived functions are never serialised: the Jacobian of a large right-hand side is 10–40× its size
    (the tied-port slider-crank of issue 30: rhs 481,358 instructions, its Jacobian 19,382,300, whose
    serialisation took minutes and gigabytes). Without a ``source`` (the grid functions, each at most
    GRID_INSTRUCTIONS_MAX instructions) every function's serialisation is hashed."""
    h = hashlib.sha256()

    def put(text: str) -> None:
        h.update(text.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")

    put(f"pdsl-rhs-key-2 {ca.__version__} {cc} {' '.join(FLAGS)}")
    if source is None:
        for f in funcs:
            put(f.serialize())
        return h.hexdigest()
    put(source.serialize())
    put(repr(sorted((k, repr(v)) for k, v in (opts or {}).items() if k not in _NUMERIC_OPTIONS)))
    for f in funcs:
        put(" ".join([f.name(), str(f.n_instructions()), str(f.n_in()), str(f.n_out()),
                      *(f.sparsity_in(i).serialize() for i in range(f.n_in())),
                      *(f.sparsity_out(i).serialize() for i in range(f.n_out()))]))
    return h.hexdigest()


# integrator options that change numbers the integrator uses, not the functions it is built from (left out of the key:
# one library serves every tolerance)
_NUMERIC_OPTIONS = frozenset({"abstol", "reltol", "max_num_steps", "show_eval_warnings", "disable_internal_warnings"})


def _importer(path: str) -> ca.Importer:
    # CasADi appends ".so" to a name without any dot: /proc/self/fd/N (pdsl.cache) is given as /proc/self/fd/./N
    if "." not in path:
        path = os.path.join(os.path.dirname(path), ".", os.path.basename(path))
    return ca.Importer(path, "dll")


def _loaded(key: str, cache, load=_importer, loaded: dict | None = None):
    """The library ``key`` (this process's, else the cache directory's once authenticated), else None."""
    return native_lib.load_cached(key, cache, load, _LOADED if loaded is None else loaded)


def _build(src: str, key: str, cc: str, cache, flags: tuple[str, ...] = FLAGS, load=_importer):
    """``src`` compiled with ``flags``, stored in the cache, loaded (pdsl.backend.native_lib.build)."""
    return native_lib.build(src, key, cc, cache, flags, load)


def _duration(seconds: float) -> str:
    return f"{seconds:.2g} s" if seconds >= 0.1 else f"{seconds * 1e3:.2g} ms"


def _short(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text[:200]
