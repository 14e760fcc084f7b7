"""What ``pdsl linearize`` prints and writes: text, Markdown or LaTeX; ``linearization.json`` and ``.npz``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

__all__ = ["render_text", "render_symbolic", "as_json", "write_files", "point_lines"]


def _num(v: float) -> str:
    return f"{v:.6g}" if abs(v) >= 1e-12 or v == 0 else f"{v:.3g}"


def _matrix_text(name: str, M: np.ndarray, rows, cols) -> list[str]:
    if M.size == 0:
        return [f"{name} = [] ({M.shape[0]} × {M.shape[1]})"]
    rw = max(len(r) for r in rows)
    cells = [[_num(float(v)) for v in row] for row in M]
    cw = max(max(len(c) for c in cols), max(len(c) for row in cells for c in row), 8)
    out = [f"{name} =", " " * (rw + 4) + " ".join(c.rjust(cw) for c in cols)]
    out += [f"  {r.ljust(rw)}  " + " ".join(c.rjust(cw) for c in row) for r, row in zip(rows, cells)]
    return out


def point_lines(lin, code: bool = False) -> list[str]:
    """The operating point, each value with where it came from (``code``: names as markdown code spans)."""
    pt = lin.point
    given, trimmed, undetermined = set(pt.given), set(pt.trimmed), set(pt.undetermined)
    moved = {n: before for n, before, _ in pt.moved}

    def origin(name):
        if name in given and name in moved:
            return f"given {moved[name]!r}, projected onto the constraints"
        if name in given:
            return "given"
        if name in undetermined:
            return "start value; the steady state does not determine it"
        if name in trimmed:
            return "steady state"
        if name in moved:
            return "projected onto the constraints"
        return "start value"

    q = "`" if code else ""
    out = [f"  {q}{n}{q} = {float(v)!r}  ({origin(n)})" for n, v in zip(lin.state_names, pt.x)]
    out += [f"  {q}{n}{q} = {float(v)!r}  (algebraic{', steady state' if n in trimmed else ''})" for n, v in zip(lin.algebraic_names, pt.z)]
    out += [f"  {q}{n}{q} = {float(v)!r}  (input; {'zero' if origin(n) == 'start value' else origin(n)})" for n, v in zip(lin.inputs, pt.u)]
    shown_given = [n for n in pt.given if n not in lin.state_names and n not in lin.inputs]
    if shown_given:
        out.append(f"  given as shown columns: {', '.join(q + n + q for n in shown_given)}")
    return out


def eigen_lines(lin) -> list[str]:
    out = [f"  {'eigenvalue':>36}  {'ω_n':>12}  {'ζ':>10}"]
    for lam, wn, z in zip(lin.eigenvalues, lin.natural_frequency, lin.damping + 0.0):  # + 0.0: no −0
        text = f"{lam.real:.10g}" + (f" {'+' if lam.imag >= 0 else '−'} {abs(lam.imag):.10g}i" if lam.imag != 0 else "")
        out.append(f"  {text:>36}  {wn:12.6g}  {'—' if math.isnan(z) else f'{z:10.4g}':>10}")
    return out


def render_text(lin) -> str:
    n, m = len(lin.states), len(lin.inputs)
    head = f"{lin.model}: linearized about the operating point (t = {lin.point.t:g})"
    if lin.open_loop:
        head += "; open loop (feedback-law inputs are free inputs)"
    out = [head, *point_lines(lin)]
    out.append(_equilibrium_line(lin))
    if lin.dependent:
        out.append(f"  states: {n} independent coordinates ({', '.join(lin.states)}); dependent through the "
                   f"constraints (coordinate partitioning): {', '.join(lin.dependent)}")
    out += _matrix_text("A", lin.A, lin.states, lin.states)
    out += _matrix_text("B", lin.B, lin.states, lin.inputs)
    label = "" if lin.outputs_declared else " (no outputs declared: y = the states)"
    out += [line + (label if k == 0 else "") for k, line in enumerate(_matrix_text("C", lin.C, lin.outputs, lin.states))]
    out += _matrix_text("D", lin.D, lin.outputs, lin.inputs)
    out.append("eigenvalues (unstable first), natural frequency ω_n = |λ|, damping ratio ζ = −Re λ/|λ|:")
    out += eigen_lines(lin)
    out.append(f"controllability rank {lin.controllability_rank} of {n}"
               + ("" if m else " (no exogenous inputs)") + f"; observability rank {lin.observability_rank} of {n}")
    return "\n".join(out) + "\n"


def _equilibrium_line(lin) -> str:
    worst = float(np.max(np.abs(lin.residual), initial=0.0))
    if lin.is_equilibrium:
        return f"  an equilibrium: max |dx/dt| = {worst:.3g}"
    return f"  NOT an equilibrium: max |dx/dt| = {worst:.3g} (the linearization describes deviations along a moving trajectory)"


def residual_text(lin, limit: int = 8) -> str:
    order = np.argsort(-np.abs(lin.residual))[:limit]
    return ", ".join(f"der({lin.state_names[k]}) = {lin.residual[k]:.6g}" for k in order if lin.residual[k] != 0)


# ---------------------------------------------------------------- symbolic (Markdown, LaTeX)
def render_symbolic(lin, S, fmt: str) -> str:
    """The matrices as sympy expressions of the parameters (``S``: SymbolicMatrices, or None: numeric entries),
    with the operating point and the eigenvalues, as Markdown or LaTeX."""
    import sympy as sp

    mats = (("A", S.A if S else sp.Matrix(lin.A), lin.states, lin.states),
            ("B", S.B if S else sp.Matrix(lin.B), lin.states, lin.inputs),
            ("C", S.C if S else sp.Matrix(lin.C), lin.outputs, lin.states),
            ("D", S.D if S else sp.Matrix(lin.D), lin.outputs, lin.inputs))
    if fmt == "latex":
        out = [f"% {lin.model}: linearization about the operating point (t = {lin.point.t:g})"]
        out += ["% " + line.strip() for line in point_lines(lin)]
        out.append("% " + _equilibrium_line(lin).strip())
        out.append(f"% states: {', '.join(lin.states)}; inputs: {', '.join(lin.inputs) or 'none'}; "
                   f"outputs: {', '.join(lin.outputs)}")
        if lin.dependent:
            out.append(f"% dependent states (coordinate partitioning): {', '.join(lin.dependent)}")
        for name, M, _, _ in mats:
            body = _latex(sp.Matrix(M), mat_delim="[", mat_str="matrix") if M.shape[0] and M.shape[1] else r"[\,]"
            out.append(f"\\begin{{equation}} {name} = {body} \\end{{equation}}")
        out.append("% eigenvalues, natural frequency, damping ratio:")
        out += ["% " + line.strip() for line in eigen_lines(lin)]
        out.append(f"% controllability rank {lin.controllability_rank}, observability rank {lin.observability_rank} "
                   f"of {len(lin.states)}")
        return "\n".join(out) + "\n"
    out = [f"# {lin.model}: linearization", "", f"Operating point (t = {lin.point.t:g}):", ""]
    out += ["-" + line[1:] for line in point_lines(lin, code=True)]
    out += ["", _equilibrium_line(lin).strip() + ".", ""]
    if lin.dependent:
        out += [f"Dependent states (coordinate partitioning): {', '.join(f'`{d}`' for d in lin.dependent)}.", ""]
    for name, M, rows, cols in mats:
        out.append(f"## {name}")
        out.append("")
        if not (M.shape[0] and M.shape[1]):
            out += [f"empty ({M.shape[0]} × {M.shape[1]})", ""]
            continue
        out.append("| | " + " | ".join(f"`{c}`" for c in cols) + " |")
        out.append("|---" * (len(cols) + 1) + "|")
        for i, r in enumerate(rows):
            out.append(f"| `{r}` | " + " | ".join(_md_math(M[i, j]) for j in range(len(cols))) + " |")
        out.append("")
    out += ["## Eigenvalues", "", "| eigenvalue | ω_n | ζ |", "|---|---|---|"]
    for lam, wn, z in zip(lin.eigenvalues, lin.natural_frequency, lin.damping + 0.0):
        out.append(f"| {lam.real:.10g} {'+' if lam.imag >= 0 else '−'} {abs(lam.imag):.10g}i | {wn:.6g} | "
                   f"{'—' if math.isnan(z) else f'{z:.4g}'} |")
    out += ["", f"Controllability rank {lin.controllability_rank}, observability rank {lin.observability_rank} of "
            f"{len(lin.states)}."]
    return "\n".join(out) + "\n"


def _latex(e, **kw) -> str:
    """sympy's LaTeX, an array parameter's element ``m[1]`` written m_{1}."""
    import re

    import sympy as sp

    names = {}
    for sym in getattr(e, "free_symbols", ()):
        m = re.fullmatch(r"(\w+)\[(\d+)\]", sym.name)
        if m:
            names[sym] = f"{sp.latex(sp.Symbol(m.group(1)))}_{{{m.group(2)}}}"
    return sp.latex(e, symbol_names=names, **kw)


def _md_math(e) -> str:
    """A matrix entry in a markdown table: LaTeX math (what Jupyter renders, as ``show --format markdown``), its
    bars spelt ``\\vert`` so that they do not split the table's cells."""
    import sympy as sp

    return "$" + _latex(e).replace("|", r"\vert ") + "$"


# ---------------------------------------------------------------- files
def _f(v):
    v = float(v)
    return None if math.isnan(v) or math.isinf(v) else v


def as_json(lin) -> dict:
    pt = lin.point
    return {
        "model": lin.model,
        "states": list(lin.states),
        "dependent_states": list(lin.dependent),
        "inputs": list(lin.inputs),
        "outputs": list(lin.outputs),
        "outputs_declared": lin.outputs_declared,
        "open_loop": lin.open_loop,
        "A": [[_f(v) for v in row] for row in lin.A],
        "B": [[_f(v) for v in row] for row in lin.B],
        "C": [[_f(v) for v in row] for row in lin.C],
        "D": [[_f(v) for v in row] for row in lin.D],
        "eigenvalues": [[_f(v.real), _f(v.imag)] for v in lin.eigenvalues],
        "natural_frequency": [_f(v) for v in lin.natural_frequency],
        "damping": [_f(v) for v in lin.damping],
        "controllability_rank": lin.controllability_rank,
        "observability_rank": lin.observability_rank,
        "equilibrium": lin.is_equilibrium,
        "operating_point": {
            "t": pt.t,
            "states": {n: _f(v) for n, v in zip(lin.state_names, pt.x)},
            "algebraic": {n: _f(v) for n, v in zip(lin.algebraic_names, pt.z)},
            "inputs": {n: _f(v) for n, v in zip(lin.inputs, pt.u)},
            "params": {n: _f(v) for n, v in zip(lin.param_names, pt.p)},
            "given": list(pt.given),
            "trimmed": list(pt.trimmed),
            "undetermined": list(pt.undetermined),
            "rates": {n: _f(v) for n, v in zip(lin.state_names, lin.residual)},
        },
    }


def npz_arrays(lin) -> dict:
    return {
        "A": lin.A, "B": lin.B, "C": lin.C, "D": lin.D,
        "eigenvalues": lin.eigenvalues, "natural_frequency": lin.natural_frequency, "damping": lin.damping,
        "states": np.array(lin.states, dtype=str), "dependent_states": np.array(lin.dependent, dtype=str),
        "inputs": np.array(lin.inputs, dtype=str), "outputs": np.array(lin.outputs, dtype=str),
        "x": lin.point.x, "z": lin.point.z, "u": lin.point.u, "p": lin.point.p,
        "state_names": np.array(lin.state_names, dtype=str), "rates": lin.residual,
    }


def write_files(lin, directory: str | Path) -> list[Path]:
    """``linearization.json`` and ``linearization.npz`` in ``directory``, each written atomically."""
    from ..data.csvio import atomic_path

    d = Path(directory)
    paths = [d / "linearization.json", d / "linearization.npz"]
    with atomic_path(paths[0]) as tmp:
        Path(tmp).write_text(json.dumps(as_json(lin), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    with atomic_path(paths[1]) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **npz_arrays(lin))
    return paths
