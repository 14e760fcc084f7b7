"""``pdsl show``: a model's states, parameters and derived equations (and its structure plot, power balance)."""

from __future__ import annotations

import sys

from ..diagnostics import render
from .common import EXIT_OK, compile_options, use_color, write_guarded


def cmd_show(args) -> int:
    from ..pipeline import compile_model
    from ..show import render_system

    compiled = compile_model(args.file, compile_options(args, numeric=False))
    m, system = compiled.model, compiled.system
    from ..lower.port_hamiltonian import double_bonds

    warnings = double_bonds(m)
    if warnings:
        print(render(warnings, color=use_color()), file=sys.stderr)
    sys.stdout.write(render_system(system, args.format, simplify=not args.raw))
    if any(c.kind == "velocity" for c in m.constraints):
        _show_integrability(m)
    if args.power:
        _show_power(system)
    if args.plot_structure:
        from ..backend.functions import to_casadi
        from ..sim.structure import plot_structure

        write_guarded(lambda: plot_structure(to_casadi(system), args.plot_structure), args.plot_structure)
        print(f"structure plot -> {args.plot_structure}")
    return EXIT_OK


def _show_integrability(model) -> None:
    from ..lower.integrability import classify_model_constraints

    print("\nVelocity constraints (Frobenius test):")
    for c, _integrable, why in classify_model_constraints(model):
        print(f"  line {c.span.line}: {why}")


def _show_power(system) -> None:
    from ..show import power_report

    print(power_report(system))

