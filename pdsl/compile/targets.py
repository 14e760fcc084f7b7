"""`pdsl compile`: take a model's numerical code away (CasADi files, C, plain numpy).

Every target writes into a fresh temporary directory and moves it into place
only when everything succeeded. Generated identifiers never contain model
names: signals are addressed by index (``x[3]``), and names appear only in the
JSON manifest and in comments, escaped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import casadi as ca
import sympy as sp

from .. import __version__
from .. import symbols as S
from ..backend.functions import NumericSystem
from ..diagnostics import InternalError, PdslError
from ..numerics.fixed_step import explicit_rk_step
from ..resolve.model import network_derivative
from ..vocab import COMPILE_STEP
from .ccode import event_conditions, event_support, generate_c, reset_function

__all__ = ["TARGETS", "compile_to", "manifest", "event_support", "reset_function"]  # the last two: pdsl.compile.ccode's

TARGETS = ("casadi", "c", "python", "fmu")


def _functions(num: NumericSystem) -> dict[str, ca.Function]:
    out = {"dae": num.dae, "outputs": num.outputs, "constraints": num.constraints}
    if num.rhs is not None:
        out["rhs"] = num.rhs
        out["step"] = rk4_step(num)
    if num.energy is not None:
        out["energy"] = num.energy
    if num.hybrid is not None:
        hy = num.hybrid
        out["event_indicators"] = hy.atoms
        out["event_conditions"] = event_conditions(num)
        for j in range(len(hy.conditions)):
            if hy.resets[j] is not None:
                out[f"reset_{j}"] = reset_function(num, j, f"reset_{j}")
    return out


def _tree_json(tree):
    kind, arg = tree
    return [kind, arg] if kind == "atom" else [kind, [_tree_json(s) for s in arg]]


def events_manifest(num: NumericSystem) -> dict:
    """The events for manifest.json: indicators (strictness) and per event its condition tree over them."""
    hy = num.hybrid
    where = {n: i for i, n in enumerate(num.x_names)}
    return {
        "indicators": [{"index": k, "strict": bool(s)} for k, s in enumerate(hy.strict)],
        "events": [
            {"label": hy.labels[j], "line": int(hy.lines[j]), "condition": _tree_json(hy.conditions[j]),
             "targets": list(hy.targets[j]), "target_states": [where[n] for n in hy.targets[j] if n in where],
             "terminate": bool(hy.terminate[j]), "reset": f"reset_{j}" if hy.resets[j] is not None else None}
            for j in range(len(hy.conditions))
        ],
    }


def rk4_step(num: NumericSystem) -> ca.Function:
    """One classical RK4 step of the ODE rhs: step(t, x, p, u, h) -> x_next (u held constant)."""
    t, h = ca.MX.sym("t"), ca.MX.sym("h")
    x = ca.MX.sym("x", num.nx)
    p = ca.MX.sym("p", len(num.p_names))
    u = ca.MX.sym("u", len(num.u_names))
    xn = explicit_rk_step(lambda s, y: num.rhs(s, y, p, u), COMPILE_STEP, t, x, h)
    return ca.Function("step", [t, x, p, u, h], [xn], ["t", "x", "p", "u", "h"], ["x_next"])


def manifest(num: NumericSystem, functions: dict[str, ca.Function]) -> dict:
    sys = num.system
    return {
        "pdsl_version": __version__,
        "model": sys.name,
        "description": sys.doc,
        "formalism": sys.formalism,
        "states": list(num.x_names),
        "algebraics": list(num.z_names),
        "parameters": [{"name": n, "default": float(v)} for n, v in zip(num.p_names, num.p_default)],
        "inputs": list(num.u_names),
        "outputs": list(num.y_names),
        "state_start": [float(v) for v in num.x_start],
        "functions": {
            name: {"inputs": f.name_in(), "outputs": f.name_out(), "sizes_in": [list(f.size_in(i)) for i in range(f.n_in())]}
            for name, f in sorted(functions.items())
        },
        **({"events": events_manifest(num)} if num.hybrid is not None else {}),
    }


def compile_to(num: NumericSystem, target: str, out_dir: str | Path, *, cc: str | None = None, experiment=None,
               progress=None) -> list[Path]:
    """Write ``target`` for ``num`` into ``out_dir`` (replaced atomically). Returns the files written.
    ``experiment`` (:class:`pdsl.compile.fmu.Experiment`) and ``progress`` (one line per phase) are the FMU's."""
    if target not in TARGETS:
        raise PdslError.at("BadOption", f"--target {target}: unknown", hint="one of: " + ", ".join(TARGETS))
    if experiment is not None and target != "fmu":
        raise PdslError.at("BadOption", f"--t-end/--dt set an FMU's default experiment; --target {target} has none",
                           hint="drop them, or use --target fmu")
    event_support(num, target)
    if target == "fmu":  # one file, not a directory (pdsl/compile/fmu.py)
        from .fmu import write_fmu

        return [write_fmu(_consistent_start(num), out_dir, cc=cc, experiment=experiment, progress=progress)]
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise PdslError.at("BadOption", f"-o {out}: exists and is not a directory")
    num = _consistent_start(num)
    out.parent.mkdir(parents=True, exist_ok=True)
    from ..cache import output_temp_prefix, sweep_output_temporaries, temporary_dir

    # .<name>.tmp-<pid>-<hex>, locked while this run writes it (removed on failure): one a killed run left (kill -9
    # skips every cleanup) is removed by the next write into this directory, a live writer's is kept
    sweep_output_temporaries(out.parent)
    with temporary_dir(out.parent, output_temp_prefix(out)) as tmp:
        {"casadi": _casadi, "c": _c, "python": _python}[target](num, tmp, cc)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    return sorted(p for p in out.rglob("*") if p.is_file())


def _consistent_start(num: NumericSystem) -> NumericSystem:
    """The start state on the constraint manifold (as `simulate` would start), for the manifest and the C example."""
    from dataclasses import replace

    from ..sim.initial import Projector

    proj = Projector(num)
    if proj.n == 0:
        return num
    return replace(num, x_start=proj.project(num.x_start, num.p_default).x)


def _write_manifest(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


# ---------------------------------------------------------------- casadi
def _casadi(num: NumericSystem, out: Path, cc) -> None:
    fns = _functions(num)
    for name, f in fns.items():
        f.save(str(out / f"{name}.casadi"))
    _write_manifest(out / "manifest.json", manifest(num, fns))


# ---------------------------------------------------------------- C
_C_EXAMPLE = r"""/* Steps the model with the generated RK4 step and prints the trajectory as CSV.
 * Build: cc -O2 -o example example.c model.c -lm      (or link against libmodel.so)
 * Generated by pdsl; edit freely. */
#include <stdio.h>
#include "model.h"

#define NX %(nx)d
#define NP %(np)d
#define NU %(nu)d

int main(void) {
  double t = 0.0, h = 0.01;
  double x[NX > 0 ? NX : 1] = {%(x0)s};
  double xn[NX > 0 ? NX : 1];
  double p[NP > 0 ? NP : 1] = {%(p0)s};
  double u[NU > 0 ? NU : 1] = {0};
  /* work arrays as large as the generated code asks (a graph with sub-functions, e.g. a
     neural network, needs more argument slots than the step's own five inputs) */
  const double *arg[step_SZ_ARG > 5 ? step_SZ_ARG : 5];
  double *res[step_SZ_RES > 1 ? step_SZ_RES : 1];
  casadi_int iw[step_SZ_IW > 0 ? step_SZ_IW : 1];
  double w[step_SZ_W > 0 ? step_SZ_W : 1];
  for (int k = 0; k <= 100; ++k) {
    printf("%%.6f", t);
    for (int i = 0; i < NX; ++i) printf(",%%.12g", x[i]);
    printf("\n");
    arg[0] = &t; arg[1] = x; arg[2] = p; arg[3] = u; arg[4] = &h;
    res[0] = xn;
    if (step(arg, res, iw, w, 0)) return 1;
    for (int i = 0; i < NX; ++i) x[i] = xn[i];
    t += h;
  }
  return 0;
}
"""


def _c(num: NumericSystem, out: Path, cc) -> None:
    fns = _functions(num)
    generate_c([fns[name] for name in sorted(fns)], out)
    _write_manifest(out / "manifest.json", manifest(num, fns))
    if "step" in fns:
        (out / "example.c").write_text(
            _C_EXAMPLE % {
                "nx": num.nx, "np": len(num.p_names), "nu": len(num.u_names),
                "x0": ", ".join(repr(float(v)) for v in num.x_start) or "0",
                "p0": ", ".join(repr(float(v)) for v in num.p_default) or "0",
            },
            encoding="utf-8",
        )
    (out / "BUILD.md").write_text(
        "# Building the generated C code\n\n"
        "```\ncc -O2 -fPIC -shared -o libmodel.so model.c -lm\ncc -O2 -o example example.c model.c -lm\n./example > trajectory.csv\n```\n\n"
        "Functions and their argument order are listed in manifest.json.\n",
        encoding="utf-8",
    )
    compiler = cc or shutil.which("cc") or shutil.which("gcc")
    if compiler:
        _run([compiler, "-O2", "-fPIC", "-shared", "-o", "libmodel.so", "model.c", "-lm"], out)
        if "step" in fns:
            _run([compiler, "-O2", "-o", "example", "example.c", "model.c", "-lm"], out)


def _run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise PdslError.at("CompilerFailure", f"`{' '.join(cmd)}` failed: {proc.stderr.strip()[:500]}")


# ---------------------------------------------------------------- python (numpy only)
_PY_HEADER = '''"""Standalone numpy module generated by pdsl {version} from model {model!r}.

Needs only numpy. Signals are addressed by position; NAMES lists them.
"""

import numpy

STATES = {states!r}
PARAMETERS = {params!r}
DEFAULTS = numpy.array({defaults!r})
INPUTS = {inputs!r}
START = numpy.array({start!r})
'''


def _python(num: NumericSystem, out: Path, cc) -> None:
    sys = num.system
    if sys.algebraics:
        raise PdslError.at("NotYetSupported", "the python target for DAEs is not implemented yet", sys.span)
    from sympy.printing.numpy import NumPyPrinter

    mapping = {S.TIME: sp.Symbol("t")}
    lines_in = ["    t = float(t)", "    x = numpy.asarray(x, dtype=float)", "    p = numpy.asarray(p, dtype=float)",
                "    u = numpy.asarray(u, dtype=float)"]
    for i, s in enumerate(sys.states):
        mapping[s.symbol] = sp.Symbol(f"x_{i}")
    for i, q in enumerate(sys.params):
        mapping[q.symbol] = sp.Symbol(f"p_{i}")
    for i, v in enumerate(sys.exogenous_inputs):
        mapping[v.symbol] = sp.Symbol(f"u_{i}")
    unpack = [f"    x_{i} = x[{i}]" for i in range(len(sys.states))]
    unpack += [f"    p_{i} = p[{i}]" for i in range(len(sys.params))]
    unpack += [f"    u_{i} = u[{i}]" for i in range(len(sys.exogenous_inputs))]
    laws = sys.input_laws()
    printer = NumPyPrinter({"fully_qualified_modules": True})

    def prep(e):
        return (e.xreplace(laws) if laws else e).xreplace(mapping)

    nets = _NetworkCalls(sys, printer)

    def body(exprs: list[sp.Expr], result: str) -> list[str]:
        code, prepared = nets.replace([prep(e) for e in exprs])
        subs, reduced = sp.cse(prepared, symbols=sp.numbered_symbols("c_"))
        code += [f"    {printer.doprint(sym)} = {printer.doprint(val)}" for sym, val in subs]
        items = ", ".join(printer.doprint(r) for r in reduced)
        code.append(f"    {result} = numpy.array([{items}], dtype=float)" if reduced else f"    {result} = numpy.zeros(0)")
        return code

    src = [_PY_HEADER.format(
        version=__version__, model=sys.name, states=list(num.x_names), params=list(num.p_names),
        defaults=[float(v) for v in num.p_default], inputs=list(num.u_names), start=[float(v) for v in num.x_start],
    )]
    if nets.specs:
        src.append(_PY_MLP.format(nets=nets.specs))
    src.append("\ndef rhs(t, x, p=DEFAULTS, u=()):\n    \"\"\"Time derivative of the state.\"\"\"")
    src += lines_in + unpack
    if sys.is_explicit():
        src += body([e.rhs for e in sys.differential], "xdot")
        src.append("    return xdot")
    else:
        A, b = sys.linear_system()
        n, m = A.shape
        src += body(list(A) + list(b), "flat")
        src.append(f"    A = flat[:{n * m}].reshape({n}, {m})")
        src.append(f"    b = flat[{n * m}:]")
        src.append(f"    return numpy.linalg.solve(A, b)[:{len(sys.states)}]")
    src.append("\n\ndef energy(t, x, p=DEFAULTS, u=()):\n    \"\"\"The model's energy (None when it has none).\"\"\"")
    if sys.energy is None:
        src.append("    return None")
    else:
        src += lines_in + unpack + body([sys.energy], "e")
        src.append("    return float(e[0])")
    if num.hybrid is not None:
        src += _python_events(num, lines_in, unpack, body, prep)
    src.append('''

def step(t, x, h, p=DEFAULTS, u=()):
    """One classical RK4 step (inputs held constant over the step)."""
    k1 = rhs(t, x, p, u)
    k2 = rhs(t + h / 2, x + h / 2 * k1, p, u)
    k3 = rhs(t + h / 2, x + h / 2 * k2, p, u)
    k4 = rhs(t + h, x + h * k3, p, u)
    return x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
''')
    code = "\n".join(src)
    module = _module_name(sys.name)
    (out / f"{module}.py").write_text(code, encoding="utf-8")
    _write_manifest(out / "manifest.json", {**manifest(num, {}), "python_module": f"{module}.py"})


def _python_events(num: NumericSystem, lines_in, unpack, body, prep) -> list[str]:
    """The events of the numpy module: EVENTS (a table, by position), event_indicators, conditions, reset and
    event_update (edges, resets read before the event, rounds), as pdsl.sim.hybrid applies them."""
    hy, sys = num.hybrid, num.system
    from ..backend.hybrid import event_atoms  # one decomposition of conditions into atoms

    atoms, strict, trees = event_atoms(sys)
    if tuple(trees) != tuple(hy.conditions) or tuple(strict) != tuple(hy.strict):
        raise InternalError("the python target's event atoms differ from pdsl.backend.hybrid's")
    allowed = {sp.Symbol("t"), *(sp.Symbol(f"x_{i}") for i in range(len(sys.states))),
               *(sp.Symbol(f"p_{i}") for i in range(len(sys.params))),
               *(sp.Symbol(f"u_{i}") for i in range(len(sys.exogenous_inputs)))}
    for j, ev in enumerate(sys.events):
        exprs = [prep(a) for a in atoms] + [prep(r.value) for r in ev.resets]
        extra = set().union(*(e.free_symbols for e in exprs)) - allowed if exprs else set()
        if extra:
            raise PdslError.at("NotYetSupported", f"--target python: {hy.labels[j]} reads quantities other than "
                               "states, parameters, inputs and t (multipliers or algebraic variables)", ev.span)
    where = {n: i for i, n in enumerate(num.x_names)}
    table = [{"label": hy.labels[j], "line": int(hy.lines[j]), "condition": hy.conditions[j],
              "targets": [where[n] for n in hy.targets[j]], "target_names": list(hy.targets[j]),
              "terminate": bool(hy.terminate[j])} for j in range(len(hy.conditions))]
    src = [f"\n\n# Events (`when`), by position: condition trees over the indicators (\"atom\", k) is true where\n"
           f"# g_k < 0 (STRICT[k]) or g_k <= 0; targets: the state indices each event resets.\n"
           f"EVENTS = {table!r}\nSTRICT = {[bool(v) for v in strict]!r}\n"]
    src.append("\ndef event_indicators(t, x, p=DEFAULTS, u=()):\n    \"\"\"The event indicators g (atom k true where "
               "g[k] < 0, or <= 0 when not STRICT[k]).\"\"\"")
    src += lines_in + unpack + body(atoms, "g")
    src.append("    return g")
    resets = []
    for j, ev in enumerate(sys.events):
        if not ev.resets:
            resets.append("None")
            continue
        resets.append(f"_reset_{j}")
        src.append(f"\n\ndef _reset_{j}(t, x, p, u):")
        src += lines_in + unpack + body([r.value for r in ev.resets], "values")
        src.append("    x_next = numpy.array(x, dtype=float)")
        src += [f"    x_next[{where[r.target]}] = values[{k}]" for k, r in enumerate(ev.resets)]
        src.append("    return x_next")
    src.append(f"\n\n_RESETS = [{', '.join(resets)}]")
    src.append(_PY_EVENTS)
    return src


_PY_EVENTS = '''

def atom_truth(g):
    """The truth value of each indicator's comparison."""
    return [bool(g[k] < 0) if STRICT[k] else bool(g[k] <= 0) for k in range(len(STRICT))]


def condition_value(tree, truth):
    """A condition tree with the atoms' truth values."""
    kind, arg = tree
    if kind == "atom":
        return truth[arg]
    values = [condition_value(sub, truth) for sub in arg]
    return all(values) if kind == "and" else any(values)


def conditions(t, x, p=DEFAULTS, u=()):
    """Whether each event's condition holds at (t, x)."""
    truth = atom_truth(event_indicators(t, x, p, u))
    return [condition_value(ev["condition"], truth) for ev in EVENTS]


def reset(j, t, x, p=DEFAULTS, u=()):
    """The state after event j's resets, every value read at (t, x), before the event (x itself, copied, for an
    event without resets)."""
    fn = _RESETS[j]
    return numpy.array(x, dtype=float) if fn is None else fn(t, x, p, u)


def event_update(t, x, before, p=DEFAULTS, u=(), max_rounds=100):
    """Apply the events at an event instant t. ``before``: the conditions just before t; ``x``: the state at t,
    where the crossing indicator has reached its new side. An event fires when its condition goes from false to
    true; the resets of one round read the state before it and apply together; then the conditions are evaluated
    again and those that became true fire in the next round. Returns (x, fired event indices, terminate,
    conditions after)."""
    x = numpy.array(x, dtype=float)
    now = conditions(t, x, p, u)
    fired_all = []
    for _ in range(max_rounds):
        fired = [j for j in range(len(EVENTS)) if now[j] and not before[j]]
        if not fired:
            return x, fired_all, False, now
        fired_all += fired
        x_next, owner = x.copy(), {}
        for j in fired:
            new = reset(j, t, x, p, u)
            for i in EVENTS[j]["targets"]:
                if i in owner:
                    raise ValueError(f"state {STATES[i]} is reset twice at t = {t}: by {EVENTS[owner[i]]['label']} "
                                     f"and {EVENTS[j]['label']}")
                owner[i] = j
                x_next[i] = new[i]
        x = x_next
        if any(EVENTS[j]["terminate"] for j in fired):
            return x, fired_all, True, conditions(t, x, p, u)
        before, now = now, conditions(t, x, p, u)
    raise RuntimeError(f"{max_rounds} rounds of events at t = {t} without an end")
'''


_PY_MLP = '''
# Neural components: (layer sizes, activation, offset of the weights in p), by position; per layer
# W (fan_out x fan_in, column-major) then b, as pdsl.backend.neural lays them out.
NETWORKS = {nets!r}


def _erf(z):
    import math
    return numpy.vectorize(math.erf)(z)


_ACT = {{
    "tanh": (numpy.tanh, lambda z, h: 1 - h * h),
    "relu": (lambda z: numpy.maximum(z, 0.0), lambda z, h: (z > 0).astype(float)),
    "softplus": (lambda z: numpy.log1p(numpy.exp(-numpy.abs(z))) + numpy.maximum(z, 0.0),
                 lambda z, h: 1 / (1 + numpy.exp(-z))),
    "sin": (numpy.sin, lambda z, h: numpy.cos(z)),
    "elu": (lambda z: numpy.where(z > 0, z, numpy.expm1(numpy.minimum(z, 0.0))),
            lambda z, h: numpy.where(z > 0, 1.0, numpy.exp(numpy.minimum(z, 0.0)))),
    "gelu": (lambda z: 0.5 * z * (1 + _erf(z / numpy.sqrt(2.0))),
             lambda z, h: 0.5 * (1 + _erf(z / numpy.sqrt(2.0))) + z / numpy.sqrt(2 * numpy.pi) * numpy.exp(-0.5 * z * z)),
    "sigmoid": (lambda z: 1 / (1 + numpy.exp(-z)), lambda z, h: h * (1 - h)),
    "identity": (lambda z: z, lambda z, h: numpy.ones_like(z)),
}}


def _mlp(index, inputs, p):
    """Output y and input Jacobian dy/dx of network ``index`` at ``inputs`` (explicit backpropagation)."""
    sizes, acts, offset = NETWORKS[index]  # acts: one activation per layer, the output layer's last
    h, k, layers = numpy.asarray(inputs, dtype=float), offset, []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        W = p[k : k + fan_in * fan_out].reshape(fan_in, fan_out).T
        k += fan_in * fan_out
        layers.append((W, p[k : k + fan_out]))
        k += fan_out
    slopes = []
    for (W, b), act in zip(layers, acts):
        s, ds = _ACT[act]
        z = W @ h + b
        h = s(z)
        slopes.append(ds(z, h))
    W_out = layers[-1][0]
    J = slopes[-1][:, None] * W_out
    for (W, _), d in zip(reversed(layers[:-1]), reversed(slopes[:-1])):
        J = (J * d) @ W
    return h, J
'''


class _NetworkCalls:
    """Replaces neural calls in expressions by symbols and emits the numpy code computing them.

    A call ``V(k, a, b)`` (output k of network V at inputs a, b) becomes ``y_n[k]`` of
    ``y_n, J_n = _mlp(i, [a, b], p)``; ``Derivative(V(k, a, b), a)`` becomes ``J_n[k, 0]``
    (summed over the positions where the variable appears), and ``Subs(Derivative(V(k, ξ, η), ξ), (ξ, η),
    (a, b))`` the same at (a, b). One network pass per distinct input list, shared by every output
    and derivative taken there. Networks are addressed by position, never by name."""

    def __init__(self, system, printer):
        from ..backend.neural import layer_sizes, n_weights

        self.printer = printer
        self.index, self.specs, offset = {}, [], len(system.params)
        for nn in (n for n in system.neural if n.n_in is not None):
            self.index[nn.fn.__name__] = len(self.specs)
            self.specs.append((layer_sizes(nn), nn.layer_acts(), offset))
            offset += n_weights(nn)
        self.passes: dict = {}

    def replace(self, exprs):
        self.passes, self.code, self.count = {}, [], 0
        out = [self._walk(e) for e in exprs]
        return self.code, out

    def _pass(self, name: str, args):
        if name not in self.index:
            raise InternalError("a neural component without weights reached the python target")
        key = (name, tuple(args))
        if key not in self.passes:
            n = len(self.passes)
            ins = ", ".join(self.printer.doprint(a) for a in args)
            self.code.append(f"    nn_y{n}, nn_J{n} = _mlp({self.index[name]}, [{ins}], p)")
            self.passes[key] = n
        return self.passes[key]

    def _grad(self, derivative: sp.Derivative, mapping: dict | None = None):
        """The network input gradient ``derivative`` stands for, at its arguments under ``mapping`` (a Subs)."""
        f, k, idx = network_derivative(derivative)
        args = [self._walk(a.xreplace(mapping) if mapping else a) for a in f.args[1:]]
        n = self._pass(f.func.__name__, args)
        return sp.Add(*[sp.Symbol(f"nn_J{n}[{k}, {i}]") for i in idx])

    def _walk(self, e):
        if not e.has(sp.core.function.AppliedUndef):
            return e
        if isinstance(e, sp.core.function.AppliedUndef):
            args = [self._walk(a) for a in e.args[1:]]
            return sp.Symbol(f"nn_y{self._pass(e.func.__name__, args)}[{int(e.args[0])}]")
        if isinstance(e, sp.Derivative):
            return self._grad(e)
        if isinstance(e, sp.Subs):
            inner, old, new = e.args
            if not isinstance(inner, sp.Derivative):
                raise PdslError.at("NotYetSupported", "the python target supports first derivatives of networks only")
            return self._grad(inner, dict(zip(old, new)))
        if not e.args:
            return e
        return e.func(*[self._walk(a) for a in e.args])


# modules the generated code (or numpy, when it is imported from the output folder) may import
_TAKEN_MODULES = frozenset({"numpy", "casadi", "sympy", "scipy", "torch", "pdsl"})


def _module_name(name: str) -> str:
    """The model name in snake case, made importable and harmless: a name that would shadow a
    standard-library module, numpy, casadi, ... (``numpy.py`` next to the script breaks
    ``import numpy``) or that is a Python keyword gets the suffix ``_model``."""
    import keyword
    import sys as _sys

    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    snake = re.sub(r"[^a-z0-9_]", "_", snake)
    snake = snake if snake and not snake[0].isdigit() else f"model_{snake}"
    if snake in _TAKEN_MODULES or snake in _sys.stdlib_module_names or keyword.iskeyword(snake):
        snake = f"{snake}_model"
    return snake
