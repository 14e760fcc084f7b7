"""`pdsl linearize`: state-space matrices about an operating point (LANGUAGE.md §12; pdsl/linearize)."""

from __future__ import annotations

import sys

from ..diagnostics import Diagnostic, PdslError, render
from .choices import FORMULATIONS
from .common import compile_options, write_guarded


def add_parser(sub, common) -> None:
    p = sub.add_parser("linearize", help="linearize about an operating point: A, B, C, D, eigenvalues, "
                                         "controllability and observability")
    common(p)
    p.add_argument("--at", action="append", default=[], metavar="NAME=VALUE",
                   help="a state (or shown column such as b.vx) at the operating point: a number or a constant "
                        "expression of the parameters (pi/2, -l[1]); the others come from the start values, or "
                        "from the steady state with --trim")
    p.add_argument("--input", action="append", default=[], metavar="NAME=VALUE",
                   help="an exogenous input's value at the operating point (default 0, or the steady state with --trim)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="parameter value")
    p.add_argument("--params", metavar="params.json", help="parameter values and network weights of a fit")
    p.add_argument("--trim", action="store_true",
                   help="solve for a steady state in the states and inputs not given (Gauss–Newton, minimum norm from "
                        "the start values); unknowns it cannot determine are reported")
    p.add_argument("--open-loop", action="store_true",
                   help="replace the inputs that have a feedback law in the model by free inputs")
    p.add_argument("--formulation", choices=FORMULATIONS, default="hamiltonian", help="Cartesian mechanics: Eq. 6 or Eq. 7")
    p.add_argument("--format", choices=("text", "markdown", "latex"), default="text",
                   help="text: numeric matrices; markdown, latex: the matrices as expressions of the parameters "
                        "(models of at most 12 states)")
    p.add_argument("-o", "--output", metavar="DIR", help="write linearization.json and linearization.npz into DIR")


def _assignments(items: list[str], option: str) -> dict[str, str]:
    from ..options import parse_assignment

    out = {}
    for item in items:
        name, value = parse_assignment(item, option)
        if name in out:
            raise PdslError.at("BadOption", f"{option} {name} is given twice")
        out[name] = value
    return out


def cmd_linearize(args) -> int:
    from ..linearize.output import render_symbolic, render_text, residual_text, write_files
    from ..linearize.run import linearize_numeric
    from ..options import parse_float
    from ..pipeline import compile_model

    compiled = compile_model(args.file, compile_options(args))
    num = compiled.numeric
    if args.params:
        from ..fit.run import apply_fitted

        num = apply_fitted(num, args.params)
    params = {n: parse_float(v, f"--param {n}") for n, v in _assignments(args.param, "--param").items()}
    lin = linearize_numeric(num, at=_assignments(args.at, "--at"), inputs=_assignments(args.input, "--input"),
                            params=params, trim=args.trim, open_loop=args.open_loop)
    if not lin.is_equilibrium:
        warn = Diagnostic("NotAnEquilibrium", "the operating point is not an equilibrium: " + residual_text(lin),
                          hint="--trim solves for a steady state in what --at/--input do not give", severity="warning")
        print(render([warn], color=sys.stderr.isatty()), file=sys.stderr)
    if lin.point.undetermined:
        print(f"note: the steady state does not determine {', '.join(lin.point.undetermined)} (kept at the start "
              "value; give it with --at)", file=sys.stderr)
    if args.format == "text":
        sys.stdout.write(render_text(lin))
    else:
        from ..linearize.symbolic import MAX_SYMBOLIC_STATES

        symbolic = lin.symbolic() if len(lin.state_names) <= MAX_SYMBOLIC_STATES and not lin.system.neural else None
        if symbolic is None:
            print(f"note: numeric entries: symbolic matrices are built for models of at most {MAX_SYMBOLIC_STATES} "
                  "states without neural components", file=sys.stderr)
        sys.stdout.write(render_symbolic(lin, symbolic, args.format))
    if args.output:
        files = []
        write_guarded(lambda: files.extend(write_files(lin, args.output)), args.output)
        print(f"-> {', '.join(str(f) for f in files)}", file=sys.stderr if args.format != "text" else sys.stdout)
    return 0
