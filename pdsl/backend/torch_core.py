"""The symbolic part of a right-hand side as generated C, called over a batch from torch.

On the torch backend (:mod:`pdsl.backend.torch_backend`) a network is a few large matrix
products, but the rest of a right-hand side — the Cartesian constraint projection with its
multipliers, Hamilton's equations around a learned mass matrix — is hundreds of scalar
operations per sample. Evaluated as torch operations on (B,)-columns, each costs a dispatch and
an autograd node; for the 3-pendulum CHNN that is ~340 operations per rhs evaluation and ~0.2 s
per minibatch of 200 four-step RK4 chunks, about as much as the network itself at width 64.

Here that part is split at the network calls and compiled:

    ins  = f_in(t, x, p, u)                     network inputs (e.g. the positions, or sin q, cos q)
    y, J = MLP(ins) and dy/dins                  torch, matrix–matrix products over the batch
    ẋ    = f_out(t, x, p, u, y, J)               everything else

``f_in`` and ``f_out`` are built in CasADi SX from the same IR and the same converter as the
CasADi backend (:class:`~pdsl.backend.sympy_to_casadi.Converter`, with each network call
replaced by symbols for its outputs and input Jacobian), together with their reverse-mode
derivatives (``jtimes``), code-generated to C with a loop over the batch (a parameter input is
shared by all samples, and its adjoint is summed over them), compiled once with the system C
compiler (``$CC`` or ``cc``) and called through ctypes on the torch tensors' memory. A
``torch.autograd.Function`` connects them to autograd (first derivatives: what training needs).

The library is built and cached exactly as the compiled right-hand sides of :mod:`pdsl.sim.compiled`
are: compiled in a private, locked work directory, its bytes stored with a MAC in the active
compiled-model cache (:func:`pdsl.cache.default_cache`, ``rhs-<sha256 of the C, compiler, flags>.so``,
counted in its size bound) and loaded from there only after they are authenticated, through the
verified descriptor (:meth:`pdsl.cache.ModelCache.load_library`): a library planted under that name,
or in a cache directory others can write (refused, one warning), is never loaded. Without a cache
(``--no-cache``, ``PDSL_NO_CACHE=1``, a library call, a refused directory) it is built privately and
kept for this process only; nothing in the cache directory is read or written.

The C is generated in double; a float32 evaluation (``pdsl fit --dtype float32``) generates the same
functions once more with ``casadi_real`` float, in a library of its own built on first use
(:meth:`CompiledCore.supports`), so that every operation runs in the batch's precision.

No compiler, a network whose inputs depend on another network's outputs, or a failed build:
:func:`build_core` returns None and the backend keeps the plain torch tape.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess

import casadi as ca
import torch

from .. import symbols as S
from ..lower.ir import SymbolicSystem
from .sympy_to_casadi import Converter

__all__ = ["build_core", "CompiledCore", "compiler", "library_key"]

DTYPE = torch.float64


def compiler() -> str | None:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    return cc if cc and shutil.which(cc) else None


FLAGS = ("-O2", "-shared", "-fPIC")
_LIBS: dict[str, ctypes.CDLL] = {}  # libraries loaded in this process, by key


def library_key(source: str, cc: str) -> str:
    """The library's key: its cache entry is ``rhs-<key>.so`` (:mod:`pdsl.backend.native_lib`'s names and rules)."""
    h = hashlib.sha256()
    for part in ("pdsl torch core", source, str(cc), " ".join(FLAGS)):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


def _library(source: str) -> ctypes.CDLL:
    """The compiled ``source``: loaded in this process, else from the active cache once authenticated, else
    built now (and stored there when there is a usable cache)."""
    from ..cache import default_cache
    from . import native_lib

    cc = compiler()
    if cc is None:
        raise OSError("no C compiler")
    key = library_key(source, cc)
    cache = default_cache()
    lib = native_lib.load_cached(key, cache, ctypes.CDLL, _LIBS)
    if lib is None:
        lib = native_lib.build(source, key, cc, cache, FLAGS, ctypes.CDLL)
    _LIBS[key] = lib
    return lib


# ---------------------------------------------------------------- network calls as symbols
class _Call:
    def __init__(self, nn, index: int, inputs: list):
        self.nn, self.inputs, self.rows = nn, inputs, set()  # rows: outputs whose input gradient is used
        self.y = ca.SX.sym(f"y{index}", nn.n_out)
        self.J = ca.SX.sym(f"J{index}", nn.n_out * nn.n_in)  # row-major: [k*n_in + i] = dy_k/din_i

    @property
    def jacobian(self) -> bool:
        return bool(self.rows)

    def used_J(self):
        """The Jacobian rows the rhs uses (only those are computed, e.g. the lower triangle of an N×N output)."""
        n = self.nn.n_in
        return ca.vertcat(*[self.J[k * n : (k + 1) * n] for k in sorted(self.rows)])


class _Stub:
    """Stands in for a network in the converter: outputs and input derivatives become symbols."""

    def __init__(self, nn, registry: list):
        self.nn, self.registry = nn, registry

    def _call(self, inputs) -> _Call:
        key = (self.nn.name, tuple(str(e) for e in inputs))
        for c in self.registry:
            if c.key == key:
                return c
        c = _Call(self.nn, len(self.registry), list(inputs))
        c.key = key
        self.registry.append(c)
        return c

    def output(self, k: int, inputs: list):
        return self._call(inputs).y[k]

    def gradient(self, k: int, inputs: list, i: int):
        c = self._call(inputs)
        c.rows.add(k)
        return c.J[k * self.nn.n_in + i]


# ---------------------------------------------------------------- C generation
_DRIVER = """
/* pdsl: {name} over a batch of B samples. A[i]: input i (stride {strides_in} doubles per sample; 0: shared);
   R[j]: output j (stride per sample, or 0: summed over the samples). */
CASADI_SYMBOL_EXPORT int pdsl_map_{name}(long long B, const casadi_real** A, casadi_real** R) {{
  static const long long sin_[{n_in_}] = {{{strides_in}}};
  static const long long sout[{n_out_}] = {{{strides_out}}};
  static const long long nout[{n_out_}] = {{{sizes_out}}};
  const casadi_real** arg = (const casadi_real**) malloc(sizeof(casadi_real*) * {sz_arg});
  casadi_real** res = (casadi_real**) malloc(sizeof(casadi_real*) * {sz_res});
  casadi_int* iw = (casadi_int*) malloc(sizeof(casadi_int) * ({sz_iw} + 1));
  casadi_real* w = (casadi_real*) malloc(sizeof(casadi_real) * ({sz_w} + 1));
  casadi_real* tmp = (casadi_real*) malloc(sizeof(casadi_real) * ({tmp_size} + 1));
  long long b, i, j, off;
  int flag = 0;
  for (j = 0; j < {n_out}; ++j) if (sout[j] == 0 && R[j]) for (i = 0; i < nout[j]; ++i) R[j][i] = 0;
  for (b = 0; b < B && !flag; ++b) {{
    for (i = 0; i < {n_in}; ++i) arg[i] = A[i] ? A[i] + b * sin_[i] : 0;
    for (j = 0, off = 0; j < {n_out}; ++j) {{
      if (sout[j] == 0) {{ res[j] = R[j] ? tmp + off : 0; off += nout[j]; }}
      else res[j] = R[j] ? R[j] + b * sout[j] : 0;
    }}
    flag = {name}(arg, res, iw, w, 0);
    for (j = 0, off = 0; j < {n_out}; ++j) if (sout[j] == 0) {{
      if (R[j]) for (i = 0; i < nout[j]; ++i) R[j][i] += tmp[off + i];
      off += nout[j];
    }}
  }}
  free(arg); free(res); free(iw); free(w); free(tmp);
  return flag;
}}
"""


class _CFun:
    """A batched C function: per-sample input/output sizes, and which of them are shared (stride 0)."""

    def __init__(self, f: ca.Function, shared_in: set[int], summed_out: set[int]):
        self.f = f
        self.name = f.name()
        self.sizes_in = [f.nnz_in(i) for i in range(f.n_in())]
        self.sizes_out = [f.nnz_out(j) for j in range(f.n_out())]
        self.strides_in = [0 if i in shared_in else n for i, n in enumerate(self.sizes_in)]
        self.strides_out = [0 if j in summed_out else n for j, n in enumerate(self.sizes_out)]
        self.fns: dict = {}  # torch dtype -> the C function of that precision

    def driver(self) -> str:
        f = self.f
        ints = lambda v: ", ".join(str(int(a)) for a in v) or "0"  # noqa: E731
        return _DRIVER.format(
            name=self.name, n_in=f.n_in(), n_out=f.n_out(), n_in_=max(f.n_in(), 1), n_out_=max(f.n_out(), 1),
            strides_in=ints(self.strides_in), strides_out=ints(self.strides_out), sizes_out=ints(self.sizes_out),
            sz_arg=max(f.sz_arg(), f.n_in(), 1), sz_res=max(f.sz_res(), f.n_out(), 1), sz_iw=f.sz_iw(), sz_w=f.sz_w(),
            tmp_size=sum(n for j, n in enumerate(self.sizes_out) if self.strides_out[j] == 0),
        )

    def bind(self, lib, dtype: torch.dtype = torch.float64) -> None:
        fn = getattr(lib, f"pdsl_map_{self.name}")
        fn.argtypes = [ctypes.c_longlong, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
        fn.restype = ctypes.c_int
        self.fns[dtype] = fn

    def __call__(self, B: int, inputs: list, outputs: list, dtype: torch.dtype = torch.float64) -> None:
        """inputs/outputs: contiguous CPU tensors of ``dtype`` (float64, or float32 once built; None or empty: no data)."""
        A = _PTRS[len(inputs)](*[a.data_ptr() if a is not None and a.numel() else None for a in inputs])
        R = _PTRS[len(outputs)](*[r.data_ptr() if r is not None and r.numel() else None for r in outputs])
        if self.fns[dtype](B, A, R):
            raise RuntimeError(f"{self.name}: evaluation failed")


_PTRS = [ctypes.c_void_p * max(n, 1) for n in range(64)]  # pointer-array types by length (made once)
C_REAL = {torch.float64: "double", torch.float32: "float"}  # the precisions the core is generated in


def _compile(funs: list[_CFun], tag: str, dtype: torch.dtype = torch.float64) -> ctypes.CDLL:
    """The functions generated with ``casadi_real`` of ``dtype`` (one library per precision; float: every
    intermediate stored in single precision, as a float32 torch evaluation of the same operations)."""
    cg = ca.CodeGenerator(f"pdsl_core_{tag}.c", {"with_header": False, "casadi_real": C_REAL[dtype],
                                                 "casadi_int": "long long"})
    for cf in funs:
        cg.add(cf.f)
    source = "#include <stdlib.h>\n" + cg.dump() + "".join(cf.driver() for cf in funs)
    lib = _library(source)
    for cf in funs:
        cf.bind(lib, dtype)
    return lib


# ---------------------------------------------------------------- autograd
class _Apply(torch.autograd.Function):
    """out = fwd(inputs); the gradient from rev(inputs, seed) for the inputs listed in ``diff``."""

    @staticmethod
    def forward(ctx, fwd: _CFun, rev: _CFun, diff: tuple, B: int, *inputs):
        arrays = [a if a.is_contiguous() else a.contiguous() for a in inputs]  # saved as they are: version-checked
        dtype = arrays[1].dtype  # the state's
        out = torch.empty(B, fwd.sizes_out[0], dtype=dtype)
        fwd(B, arrays, [out], dtype)
        ctx.fwd, ctx.rev, ctx.diff, ctx.B = fwd, rev, diff, B
        ctx.save_for_backward(*arrays)
        return out

    @staticmethod
    def backward(ctx, grad):
        arrays = ctx.saved_tensors
        B, rev = ctx.B, ctx.rev
        dtype = arrays[1].dtype
        adj = []
        for j, i in enumerate(ctx.diff):
            n = rev.sizes_out[j]
            adj.append(torch.zeros(n, dtype=dtype) if rev.strides_out[j] == 0 else torch.empty(B, n, dtype=dtype))
        rev(B, [*arrays, grad.to(dtype).contiguous()], adj, dtype)
        grads = [None] * len(arrays)
        for a, i in zip(adj, ctx.diff):
            if ctx.needs_input_grad[4 + i]:
                grads[i] = a.reshape(arrays[i].shape)
        return (None, None, None, None, *grads)


class CompiledCore:
    """``rhs(t, x, bound, u)`` with the symbolic part in generated C and the networks in torch."""

    def __init__(self, calls: list[_Call], funs: dict, n_phys: int, nx: int, tag: str = "",
                 in_columns: tuple[int, ...] | None = None):
        self.calls, self.funs, self.n_phys, self.nx, self.tag = calls, funs, n_phys, nx, tag
        # the networks' inputs when they are state columns themselves (a CHNN's positions): taken from x as a view
        # (a slice for a run of columns), not through f_in and its reverse in C
        self.in_columns = in_columns
        run = in_columns is not None and list(in_columns) == list(range(in_columns[0], in_columns[0] + len(in_columns)))
        self._in_slice = slice(in_columns[0], in_columns[0] + len(in_columns)) if run else None
        self._built = {torch.float64: True}  # dtype -> the library of that precision is loaded (False: failed)
        offs, k = [], 0
        for c in calls:
            offs.append(k)
            k += c.nn.n_in
        self.in_offsets = offs

    def supports(self, dtype: torch.dtype) -> bool:
        """Whether the core runs in ``dtype`` (float32: its library generated and built on first use)."""
        ok = self._built.get(dtype)
        if ok is None:
            ok = False
            if dtype in C_REAL:
                try:
                    _compile(list(self.funs.values()), self.tag, dtype)
                    ok = True
                except (OSError, subprocess.SubprocessError, RuntimeError):
                    ok = False
            self._built[dtype] = ok
        return ok

    def rhs(self, t: torch.Tensor, x: torch.Tensor, bound, u: torch.Tensor | None, mlp) -> torch.Tensor:
        """ẋ (B, nx) in x's dtype (float64, or float32 where :meth:`supports` it); t, p, u in the same dtype."""
        B = x.shape[0]
        dt = x.dtype
        p = bound.p[: self.n_phys] if getattr(bound, "p_phys", None) is None else bound.p_phys  # sliced once per bind
        u = torch.zeros(B, 0, dtype=dt) if u is None else u
        t = t.expand(B) if t.dim() == 0 else t
        ys, Js = [], []
        if self.calls:
            if self._in_slice is not None:
                ins = x[:, self._in_slice]
            elif self.in_columns is not None:
                ins = x[:, list(self.in_columns)]
            else:
                ins = _Apply.apply(self.funs["in"], self.funs["in_rev"], (1, 2), B, t, x, p, u)
            for c, off in zip(self.calls, self.in_offsets):
                X = ins if c.nn.n_in == ins.shape[1] else ins[:, off : off + c.nn.n_in]
                y, J = mlp(c.nn, bound.layers[c.nn.name], X, c.jacobian,
                           rows=None if len(c.rows) == c.nn.n_out else sorted(c.rows))
                ys.append(y)
                if c.jacobian:
                    Js.append(J.reshape(B, -1))
        Y = _join(ys, B, dt)
        J = _join(Js, B, dt)
        return _Apply.apply(self.funs["out"], self.funs["out_rev"], (1, 2, 4, 5), B, t, x, p, u, Y, J)


def _join(parts: list, B: int, dtype) -> torch.Tensor:
    """The columns of ``parts`` side by side (one part: itself, no copy)."""
    if not parts:
        return torch.zeros(B, 0, dtype=dtype)
    return parts[0] if len(parts) == 1 else torch.cat(parts, 1)


def build_core(system: SymbolicSystem, nets: dict, laws: dict) -> CompiledCore | None:
    """The compiled core of ``system``'s rhs, or None where it does not apply (module docstring)."""
    if compiler() is None or system.algebraics:
        return None
    T = ca.SX
    t, x = T.sym("t"), T.sym("x", len(system.states))
    p, u = T.sym("p", len(system.params)), T.sym("u", len(system.exogenous_inputs))
    symbols = {S.TIME: t}
    symbols.update({s.symbol: x[i] for i, s in enumerate(system.states)})
    symbols.update({q.symbol: p[i] for i, q in enumerate(system.params)})
    symbols.update({v.symbol: u[i] for i, v in enumerate(system.exogenous_inputs)})
    registry: list[_Call] = []
    conv = Converter(symbols, {name: _Stub(nn, registry) for name, nn in nets.items()})

    def c(e):
        return conv(e.xreplace(laws) if laws else e)

    try:
        if system.is_explicit():
            xdot = ca.vertcat(*[c(e.rhs) for e in system.differential]) if system.states else T(0, 1)
        else:
            A, b = system.linear_system()
            xdot = ca.solve(c(A), c(b))[: len(system.states)]
    except Exception:  # anything the converter cannot take: the tape reports it properly
        return None
    ins = ca.vertcat(*[ca.vertcat(*cl.inputs) for cl in registry]) if registry else T(0, 1)
    Y = ca.vertcat(*[cl.y for cl in registry]) if registry else T(0, 1)
    J = ca.vertcat(*[cl.used_J() for cl in registry if cl.jacobian]) if any(cl.jacobian for cl in registry) else T(0, 1)
    if registry and ca.depends_on(ins, ca.vertcat(Y, J)):
        return None  # a network fed by another network: not split here
    tag = hashlib.sha256(system.name.encode()).hexdigest()[:8]
    funs = {}
    in_columns = _state_columns(ins, x) if registry else None
    if in_columns is None:
        s_in = T.sym("s_in", ins.shape[0])
        funs["in"] = _CFun(ca.Function(f"pdsl_in_{tag}", [t, x, p, u], [ins]), {2}, set())
        adj = ca.jtimes(ins, ca.vertcat(x, p), s_in, True) if ins.shape[0] else T.zeros(x.shape[0] + p.shape[0], 1)
        funs["in_rev"] = _CFun(ca.Function(f"pdsl_in_rev_{tag}", [t, x, p, u, s_in],
                                           [adj[: x.shape[0]], adj[x.shape[0] :]]), {2}, {1})
    s_out = T.sym("s_out", xdot.shape[0])
    funs["out"] = _CFun(ca.Function(f"pdsl_out_{tag}", [t, x, p, u, Y, J], [xdot]), {2}, set())
    z = ca.vertcat(x, p, Y, J)
    adj = ca.jtimes(xdot, z, s_out, True)
    cuts = [0, x.shape[0], x.shape[0] + p.shape[0], x.shape[0] + p.shape[0] + Y.shape[0], z.shape[0]]
    parts = [adj[cuts[i] : cuts[i + 1]] for i in range(4)]
    funs["out_rev"] = _CFun(ca.Function(f"pdsl_out_rev_{tag}", [t, x, p, u, Y, J, s_out], parts), {2}, {1})
    try:
        _compile(list(funs.values()), tag)
    except (OSError, subprocess.SubprocessError, RuntimeError):  # a failed build: the tape instead
        return None
    return CompiledCore(registry, funs, len(system.params), len(system.states), tag, in_columns)


def _state_columns(ins, x) -> tuple[int, ...] | None:
    """The indices of the states the network inputs ``ins`` are, when each input is a state symbol itself (the
    positions fed to a CHNN's potential); None when any input is computed (sin q, a parameter, time)."""
    cols = []
    for k in range(ins.shape[0]):
        e = ins[k]
        if not e.is_symbolic():
            return None
        hit = next((i for i in range(x.shape[0]) if ca.is_equal(e, x[i])), None)
        if hit is None:
            return None
        cols.append(hit)
    return tuple(cols) if cols else None
