"""``pdsl check``: parse, resolve and lower model files; counts, warnings and notes per model."""

from __future__ import annotations

import sys

from ..diagnostics import Diagnostic, PdslError, render
from .common import EXIT_OK, EXIT_USER, consts, use_color


def _velocity_notes(model) -> list[Diagnostic]:
    """What `check` says of a model that lowers: two junctions bonded twice (warning[DoubleBond]), velocity
    constraints that integrate, alone or only in combination (note[HolonomicInDisguise], note[IntegrableCombination])."""
    from ..lower.integrability import velocity_notes
    from ..lower.port_hamiltonian import double_bonds

    return double_bonds(model) + velocity_notes(model)


def cmd_check(args) -> int:
    from ..lower import formalism_of, lower
    from ..pipeline import load_models

    values, failed = consts(args.const), []
    for path in args.files:
        try:
            models = load_models(path, consts=values)
            if not models:
                raise PdslError.at("EmptyFile", f"{path} defines no model",
                                   hint="a file holds `model Name ... end` blocks")
        except PdslError as err:
            print(render(err.diagnostics, color=use_color()), file=sys.stderr)
            failed.append(path)
            continue
        lowered = True
        for m in models:
            try:  # the structural checks of lowering: a model `check` accepts, `show`/`simulate` accept too
                lower(m)
            except PdslError as err:
                print(render(err.diagnostics, color=use_color()), file=sys.stderr)
                lowered = False
                continue
            counts = []
            for label, n in (
                ("params", len(m.params)), ("inputs", len(m.inputs)), ("outputs", len(m.outputs)),
                ("variables", len(m.variables)), ("bodies", len(m.bodies)), ("connectors", len(m.connectors)),
                ("constraints", len(m.constraints)), ("equations", len(m.equations)), ("networks", len(m.neural)),
                ("elements", len(m.elements)),
            ):
                if n:
                    counts.append(f"{n} {label}")
            where = f"{path}: " if len(args.files) > 1 else ""
            print(f"ok  {where}{m.name:<20} {formalism_of(m):<16} {', '.join(counts)}")
            notes = _velocity_notes(m)
            if notes:
                print(render(notes))
        if not lowered:
            failed.append(path)
    if failed:
        if len(args.files) > 1:
            print(f"{len(failed)} of {len(args.files)} files failed: {', '.join(failed)}", file=sys.stderr)
        return EXIT_USER
    return EXIT_OK

