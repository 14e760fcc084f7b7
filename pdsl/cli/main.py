"""The ``pdsl`` command: a thin layer over the library, one function per subcommand.

Exit codes: 0 ok, 2 user error (a model, data or option problem, reported as
located diagnostics), 1 internal error (``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from contextlib import contextmanager

from ..diagnostics import Diagnostic, PdslError, render
from ..options import finite_float, integer

DEFAULT_INTERVALS = 1000  # `simulate` without --dt: this many output intervals over [0, --t-end]

EXIT_OK, EXIT_INTERNAL, EXIT_USER = 0, 1, 2


def _shows_default(action) -> bool:
    """An option whose default is worth printing: set, not a flag's False, not an empty list (0 is shown)."""
    d = action.default
    return bool(action.option_strings) and not (d is None or d is False or d == [] or d == argparse.SUPPRESS)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help that shows every default that is set (not None, False or empty)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "%(default)" in text or not _shows_default(action):
            return text
        return f"{text} (default: %(default)s)" if text else "default: %(default)s"

    def _format_action(self, action):  # an option without help text still shows its default
        if action.help is None and _shows_default(action):
            action.help = ""
        return super()._format_action(action)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):  # argparse's own errors become pdsl diagnostics
        raise PdslError(Diagnostic("BadOption", message, hint=f"see `{self.prog} --help`"))


def _common(p: argparse.ArgumentParser, *, model: bool = True, many: bool = False) -> None:
    if many:
        p.add_argument("files", nargs="+", metavar="file", help="one or more .phm model files")
    else:
        p.add_argument("file", help="a .phm model file")
    if model:
        p.add_argument("--model", help="which model of the file (needed when it holds several)")
    p.add_argument("--const", action="append", default=[], metavar="NAME=INT", help="override a structural const")
    p.add_argument("--no-cache", action="store_true",
                   help="neither read nor write the compiled-model cache (PDSL_CACHE_DIR; also PDSL_NO_CACHE=1)")


def build_parser() -> argparse.ArgumentParser:
    from .choices import FORMULATIONS, INTEGRATORS, STABILIZERS, TARGETS

    ap = _Parser(prog="pdsl", description="Declarative physical models: check, show, simulate, compile, fit, "
                 "evaluate, sweep, linearize. `pdsl COMMAND --help` describes a command.",
                 epilog="exit codes: 0 ok, 2 user error (model, data or option), 1 internal error")
    ap.add_argument("--debug", action="store_true", help="show Python tracebacks for internal errors")
    ap.add_argument("-V", "--version", action="store_true", help="print the version and exit")
    ap.add_argument("-q", "--quiet", dest="summary_quiet", action="store_true", help="no summary on standard output and no progress bars (errors still go to standard error)")
    ap.add_argument("-v", "--verbose", action="count", default=0,
                    help="more output: the elapsed time on standard error; -vv also tracebacks of internal errors and what "
                         "the numerical solvers (CasADi, SUNDIALS, IPOPT) print")
    sub = ap.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    formulations = FORMULATIONS

    p = sub.add_parser("check", help="parse, resolve and check model files")
    _common(p, model=False, many=True)

    p = sub.add_parser("show", help="show states, parameters and the derived equations")
    _common(p)
    p.add_argument("--format", choices=["text", "markdown", "latex"], default="text", help="how equations are printed")
    p.add_argument("--formulation", choices=formulations, default="hamiltonian", help="Cartesian mechanics: Eq. 6 or Eq. 7")
    p.add_argument("--raw", action="store_true", help="print equations as derived, without simplifying them for display")
    p.add_argument("--plot-structure", metavar="OUT.png", help="draw the bodies and their links/joints at the initial state")
    p.add_argument("--power", action="store_true", help="port-Hamiltonian models: the power balance dH/dt = supplied − dissipated")

    p = sub.add_parser("simulate", help="integrate a model and write a CSV (and a plot)")
    _common(p)
    p.add_argument("--t-end", type=finite_float, required=True, help="final time")
    p.add_argument("--dt", type=finite_float, default=None,
                   help=f"output sampling interval (default: --t-end/{DEFAULT_INTERVALS}, i.e. {DEFAULT_INTERVALS + 1} samples)")
    p.add_argument("--init", action="append", default=[], metavar="NAME=VALUE", help="initial value of a state")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="parameter value")
    p.add_argument("--input", action="append", default=[], metavar="NAME=EXPR", help='exogenous input, e.g. "F=sin(t)"')
    p.add_argument("--input-data", metavar="CSV", help="CSV with a t column and one column per exogenous input")
    p.add_argument("--rtol", type=finite_float, default=1e-8, help="relative tolerance (cvodes, idas, dop853)")
    p.add_argument("--atol", type=finite_float, default=None, help="absolute tolerance (default rtol/100)")
    p.add_argument("--integrator", default="auto", choices=INTEGRATORS,
                   help="auto (default: DOP853 with a stiffness test that hands over to CVODES BDF; IDAS for DAEs; "
                        "CVODES for models with events or switch times), cvodes (Adams), cvodes-bdf (stiff), idas (DAEs), "
                        "dop853 (explicit 8th order, compiled C: small non-stiff ODEs), or fixed-step rk4, euler, "
                        "midpoint, gauss2")
    p.add_argument("--substeps", type=integer, default=1, help="fixed-step schemes: steps per output interval")
    p.add_argument("--max-events", type=integer, default=None, metavar="N",
                   help="models with `when`: more than N events (default 10,000) is an accumulation (Zeno): the run "
                        "stops with an error, the table written up to there")
    p.add_argument("--switches", default="locate", choices=("locate", "step-through"),
                   help="switching surfaces on the state (`if` on states, sign): locate them like events, mode by "
                        "mode, sliding on attractive ones (Filippov; default), or step through them under the error "
                        "control")
    p.add_argument("--event-rows", default="none", choices=("none", "after", "both"),
                   help="models with `when`: add rows at the event instants (the value after, or before and after: a "
                        "repeated t); the events themselves always go to OUT.events.csv")
    p.add_argument("--compile", default="auto", choices=("auto", "yes", "no"),
                   help="cvodes/idas: evaluate the right-hand side as compiled C (built once with the C compiler, "
                        "cached) or in CasADi's VM; auto: the built library when there is one, else C when the "
                        "predicted saving exceeds the build time (docs/simulate.md)")
    p.add_argument("--stabilize", default="none", choices=STABILIZERS,
                   help="constraint drift control: none | project (after every output step) | baumgarte "
                        "(Φ̈ + 2αΦ̇ + β²Φ = 0 in the constraint rows; Cartesian models)")
    p.add_argument("--baumgarte-alpha", type=finite_float, default=None, metavar="A",
                   help="Baumgarte damping α (default: 3 × the fastest rate of the motion at the start)")
    p.add_argument("--baumgarte-beta", type=finite_float, default=None, metavar="B",
                   help="Baumgarte stiffness β (default: equal to α, critical damping)")
    p.add_argument("--no-project", action="store_true", help="do not project the initial state onto the constraints")
    p.add_argument("--random-init", type=integer, metavar="N",
                   help="simulate N random initial states, drawn by the sampling statements (--sample, --sample-file, "
                        "or FILE.sample beside the model), else perturbed by --random-scale; each projected onto the constraints")
    p.add_argument("--init-data", metavar="CSV",
                   help="simulate one trajectory per row of a CSV of initial states (columns: states or shown names "
                        "such as b.x, b.vx, der(q); missing ones take the model's start and --init); each projected")
    p.add_argument("--random-scale", type=finite_float, default=None,
                   help="generic draws: standard deviation of the perturbation of every state (default 0.2)")
    p.add_argument("--sample", action="append", default=[], metavar="STATEMENT",
                   help='a sampling statement, e.g. "q = uniform(-pi/2, pi/2)" or "b.x = l*sin(q)" (docs/simulate.md)')
    p.add_argument("--sample-file", metavar="FILE", help="sampling statements, one per line")
    p.add_argument("--seed", type=integer, default=0, help="seed of --random-init")
    p.add_argument("--threads", type=integer, default=2, help="threads for --random-init")
    p.add_argument("--formulation", choices=formulations, default="hamiltonian", help="Cartesian mechanics: Eq. 6 or Eq. 7")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="trajectory table; the format by extension: .csv, .parquet, .h5, .mat (docs/interop.md); "
                        "- writes CSV to standard output (the summary then goes to standard error); not needed with "
                        "--plot or --animate alone")
    p.add_argument("--columns", metavar="NAMES",
                   help="comma-separated columns to write, in this order (t, and traj with --random-init, are kept)")
    p.add_argument("--noise", type=finite_float, metavar="SIGMA",
                   help="add Gaussian noise SIGMA·N(0, 1) to every written column but t and traj (seeded by --noise-seed)")
    p.add_argument("--noise-seed", type=integer, default=None, help="seed of --noise (default: --seed)")
    p.add_argument("--noise-spare-t0", action="store_true", help="--noise: leave each trajectory's first sample exact")
    p.add_argument("--params", metavar="params.json",
                   help="parameter values and network weights of a fit (`pdsl fit` writes params.json and networks.npz)")
    p.add_argument("--plot", metavar="OUT.png", help="plot every state against time")
    p.add_argument("--animate", metavar="OUT.gif|OUT.html",
                   help="animate the model's picture (bodies, `draw point`/`draw line`) as a GIF or an HTML page")
    p.add_argument("--power", action="store_true",
                   help="port-Hamiltonian models: add columns H and the power e·f of every element port")

    p = sub.add_parser("compile", help="write the model's numerical code: CasADi files, C, or numpy")
    _common(p)
    p.add_argument("--target", default="casadi", choices=TARGETS,
                   help="CasADi files, C sources (+ a shared library), a numpy module, or an FMI 2.0 FMU (ME + CS)")
    p.add_argument("--params", metavar="params.json",
                   help="fitted values (written by `pdsl fit`) baked in as the parameter defaults")
    p.add_argument("--formulation", choices=formulations, default="hamiltonian", help="Cartesian mechanics: Eq. 6 or Eq. 7")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="output directory (FILE.fmu for --target fmu)")
    p.add_argument("--t-end", type=finite_float, metavar="T",
                   help="--target fmu: the default experiment's stop time (default 10 s)")
    p.add_argument("--dt", type=finite_float, metavar="DT", help="--target fmu: its output step (default T/1000)")

    from . import fit_cmd

    fit_cmd.add_parsers(sub, _common)
    from . import sweep_cmd

    sweep_cmd.add_parser(sub, _common)
    from . import linearize_cmd

    linearize_cmd.add_parser(sub, _common)
    p = sub.add_parser("completion", help="print a shell completion script (bash, zsh or fish)")
    p.add_argument("shell", choices=("bash", "zsh", "fish"), help="eval \"$(pdsl completion bash)\" in ~/.bashrc")
    for action in sub._choices_actions:  # `pdsl COMMAND --help` starts with what `pdsl --help` says of it
        parser = sub.choices[action.dest]
        if parser.description is None:
            parser.description = action.help
    for parser in set(sub.choices.values()):
        _global_flags_after(parser)
    return ap


def _global_flags_after(p: argparse.ArgumentParser) -> None:
    """The global flags also after the command (`pdsl simulate m.phm -v ...`): absent there, they leave the value
    given before it (SUPPRESS); -v after the command adds to the count before it (_main). A flag the command
    already defines (fit's own --quiet: no progress bar) stays the command's."""
    taken = set(p._option_string_actions)
    if "--debug" not in taken:
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="as before the command")
    quiet = [f for f in ("-q", "--quiet") if f not in taken]
    if quiet:
        p.add_argument(*quiet, dest="summary_quiet", action="store_true", default=argparse.SUPPRESS,
                       help="as before the command")
    verbose = [f for f in ("-v", "--verbose") if f not in taken]
    if verbose:
        p.add_argument(*verbose, dest="verbose_after", action="count", default=argparse.SUPPRESS,
                       help="as before the command")


def _consts(items: list[str]) -> dict[str, int]:
    from ..options import parse_assignment

    out = {}
    for item in items:
        name, value = parse_assignment(item, "--const")
        try:
            out[name] = integer(value)
        except argparse.ArgumentTypeError:
            raise PdslError.at("BadOption", f"--const {name}={value}: a const is an integer") from None
    return out


def compile_options(args, *, numeric: bool = True, stabilize: str = "none"):
    """The frozen :class:`~pdsl.pipeline.CompileOptions` of a command's arguments."""
    from ..pipeline import CompileOptions

    return CompileOptions(model=getattr(args, "model", None), consts=_consts(args.const),
                          formulation=getattr(args, "formulation", "hamiltonian"), stabilize=stabilize, numeric=numeric)


def _velocity_notes(model) -> list[Diagnostic]:
    """What `check` says of a model that lowers: two junctions bonded twice (warning[DoubleBond]), velocity
    constraints that integrate, alone or only in combination (note[HolonomicInDisguise], note[IntegrableCombination])."""
    from ..lower.integrability import velocity_notes
    from ..lower.port_hamiltonian import double_bonds

    return double_bonds(model) + velocity_notes(model)


def cmd_check(args) -> int:
    from ..lower import formalism_of, lower
    from ..pipeline import load_models

    consts, failed = _consts(args.const), []
    for path in args.files:
        try:
            models = load_models(path, consts=consts)
            if not models:
                raise PdslError.at("EmptyFile", f"{path} defines no model",
                                   hint="a file holds `model Name ... end` blocks")
        except PdslError as err:
            print(render(err.diagnostics, color=_color()), file=sys.stderr)
            failed.append(path)
            continue
        lowered = True
        for m in models:
            try:  # the structural checks of lowering: a model `check` accepts, `show`/`simulate` accept too
                lower(m)
            except PdslError as err:
                print(render(err.diagnostics, color=_color()), file=sys.stderr)
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


def cmd_show(args) -> int:
    from ..pipeline import compile_model
    from ..show import render_system

    compiled = compile_model(args.file, compile_options(args, numeric=False))
    m, system = compiled.model, compiled.system
    from ..lower.port_hamiltonian import double_bonds

    warnings = double_bonds(m)
    if warnings:
        print(render(warnings, color=_color()), file=sys.stderr)
    sys.stdout.write(render_system(system, args.format, simplify=not args.raw))
    if any(c.kind == "velocity" for c in m.constraints):
        _show_integrability(m)
    if args.power:
        _show_power(system)
    if args.plot_structure:
        from ..backend.functions import to_casadi
        from ..sim.structure import plot_structure

        _write(lambda: plot_structure(to_casadi(system), args.plot_structure), args.plot_structure)
        print(f"structure plot -> {args.plot_structure}")
    return EXIT_OK


def _show_integrability(model) -> None:
    from ..lower.integrability import classify_model_constraints

    print("\nVelocity constraints (Frobenius test):")
    for c, _integrable, why in classify_model_constraints(model):
        print(f"  line {c.span.line}: {why}")


def _with_power_outputs(model, system):
    """Append H and each port's power e·f as outputs (so they become CSV columns)."""
    from dataclasses import replace

    from ..resolve.model import Output

    if not system.ports:
        raise PdslError.at("BadOption", f"--power: {system.name} has no element ports whose power could be recorded "
                           "(it applies to port-Hamiltonian networks)", model.span)
    extra = [Output(name="H", expr=system.energy, span=system.span)]
    extra += [Output(name=f"power({p.name})", expr=p.power, span=p.span) for p in system.ports]
    return replace(system, outputs=system.outputs + tuple(extra))


def _show_power(system) -> None:
    from ..show import power_report

    print(power_report(system))


def cmd_simulate(args) -> int:
    from ..backend.functions import to_casadi
    from ..data.csvio import write_table
    from ..pipeline import compile_model
    from ..sim.simulate import (
        input_from_expression,
        inputs_from_csv,
        parse_assignment,
        parse_float,
        simulate,
        time_grid,
    )

    if args.output is None:  # a plot or an animation alone is a complete run; nothing at all is not
        if not (args.plot or getattr(args, "animate", None)):
            raise PdslError.at("BadOption", "simulate writes nothing: give -o OUT (the table), --plot OUT.png or "
                               "--animate OUT.gif", hint="e.g. -o run.csv, or --plot run.png")
        for flag, given in (("--random-init", args.random_init is not None), ("--init-data", args.init_data is not None),
                            ("--columns", args.columns), ("--noise", args.noise is not None)):
            if given:
                raise PdslError.at("BadOption", f"{flag} needs -o OUT: it shapes the table simulate writes",
                                   hint="add -o run.csv")
    if args.dt is None:
        args.dt = args.t_end / DEFAULT_INTERVALS
    grid = time_grid(args.t_end, args.dt)
    for opt, v in (("--rtol", args.rtol), ("--atol", args.atol)):
        if v is not None and not (0 < v < 1):
            raise PdslError.at("BadOption", f"{opt} must be between 0 and 1, got {v}")
    if (args.baumgarte_alpha is not None or args.baumgarte_beta is not None) and args.stabilize != "baumgarte":
        raise PdslError.at("BadOption", "--baumgarte-alpha/--baumgarte-beta need --stabilize baumgarte")
    compiled = compile_model(args.file, compile_options(  # --power adds outputs to the symbolic system first
        args, numeric=not args.power, stabilize="baumgarte" if args.stabilize == "baumgarte" else "none"))
    m, system = compiled.model, compiled.system
    if args.power:
        system = _with_power_outputs(m, system)
        num = to_casadi(system)
    else:
        num = compiled.numeric
    if args.params:  # a fit's values and network weights as the defaults
        from ..fit.run import apply_fitted

        num = apply_fitted(num, args.params)
    if getattr(args, "animate", None):  # a model with nothing to draw is told so before anything is integrated
        from ..sim.drawing import require_picture
        from ..sim.plot import check_animation_path

        check_animation_path(args.animate)
        require_picture(system, "--animate")
    if args.noise is not None and not args.noise > 0:
        raise PdslError.at("BadOption", f"--noise must be a positive number, got {args.noise}")
    init = {}
    for item in args.init:
        name, value = parse_assignment(item, "--init")
        init[name] = parse_float(value, f"--init {name}")
    params = {}
    for item in args.param:
        name, value = parse_assignment(item, "--param")
        params[name] = parse_float(value, f"--param {name}")
    inputs = {}
    if args.input_data:
        inputs.update(inputs_from_csv(args.input_data, num.u_names, cover=(float(grid[0]), float(grid[-1])),
                                      units=num.system.units))
    for item in args.input:
        name, value = parse_assignment(item, "--input")
        if name not in num.u_names:
            hint = "exogenous inputs: " + (", ".join(num.u_names) or "none (inputs with a feedback law are computed by the model)")
            raise PdslError.at("BadOption", f"--input {name}: the model has no exogenous input `{name}`", hint=hint)
        inputs[name] = input_from_expression(num, name, value)
    if args.init_data is not None and args.random_init is not None:
        raise PdslError.at("BadOption", "--init-data and --random-init exclude each other",
                           hint="initial states come either from a CSV or from random draws")
    if args.random_init is not None or args.init_data is not None:
        return _simulate_random(args, m, num, grid, init, params, inputs)
    if args.sample or args.sample_file or args.random_scale is not None:
        raise PdslError.at("BadOption", "--sample, --sample-file and --random-scale need --random-init N")
    try:
        res = simulate(num, grid, x0=init, params=params, inputs=inputs, rtol=args.rtol, atol=args.atol,
                       integrator=args.integrator, substeps=args.substeps, project=not args.no_project,
                       stabilize=args.stabilize, baumgarte_alpha=args.baumgarte_alpha,
                       baumgarte_beta=args.baumgarte_beta, compile=args.compile, max_events=args.max_events,
                       power_integral=True,
                       event_rows=args.event_rows, switches=args.switches)
    except PdslError as exc:  # a Zeno stop: the table up to there, then the error
        partial = getattr(exc, "partial", None)
        if partial is not None:
            _write_simulation(args, partial)
        raise
    _write_simulation(args, res)
    grid = res.t
    events = res.info.get("events")
    how = f"rtol {args.rtol:g}" if "rtol" in res.info else f"h = {args.dt / args.substeps:g}"
    print(f"{m.name}: {len(grid)} samples, t = 0 … {grid[-1]:g}, {res.info['integrator']} {how}"
          + (f" -> {args.output}" if args.output else ""))
    _print_auto(res.info)
    if res.info.get("switches"):
        _print_switches(args, res.info["switches"])
    if events is not None:
        _print_events(args, events)
    if res.info.get("rhs"):  # pdsl.sim.compiled: VM or compiled C, and why
        print(f"  right-hand side: {res.info['rhs']}")
    if res.info.get("switch_times"):  # conditions on t alone (pdsl.backend.events)
        print(f"  stopped and restarted at the switches of conditions on t: t = {', '.join(f'{s:.12g}' for s in res.info['switch_times'])}")
    if res.info.get("state_conditions"):
        print(f"  note: {res.info['state_conditions']}")
    proj = res.info.get("projection")
    if proj is not None and proj.changes:
        print(f"  initial state projected onto the constraints (residual {proj.residual_before:.2e} -> {proj.residual_after:.1e}):")
        for name, before, after in proj.changes[:12]:
            print(f"    {name}: {before:.10g} -> {after:.10g}")
        if len(proj.changes) > 12:
            print(f"    ... and {len(proj.changes) - 12} more")
    if res.energy is not None:
        print(_energy_line(res))
    for b in res.info.get("balances", ()):
        print(f"  {b.label}: max |d/dt {b.name} − rate| = {b.max_residual:.3e} along the trajectory")
    _print_baumgarte(res.info)
    if res.constraint_rms is not None:
        print(f"  constraint violation: final RMS {res.constraint_rms[-1]:.3e}, max RMS {res.constraint_rms.max():.3e}")
    if args.plot:
        from ..sim.plot import plot_states

        _write(lambda: plot_states(res, args.plot, title=m.name), args.plot)
        print(f"  plot -> {args.plot}")
    if getattr(args, "animate", None):
        from ..sim.plot import animate_bodies

        _write(lambda: animate_bodies(res, system, args.animate), args.animate)
        print(f"  animation -> {args.animate}")
    return EXIT_OK


def _write_simulation(args, res) -> None:
    """The trajectory table (and, for a model with events, OUT.events.csv beside it); nothing without -o."""
    from ..data.csvio import write_table

    if args.output is None:
        return

    names, data = res.columns()
    if args.columns:
        from ..data.formats import parse_columns, select_columns

        names, data = select_columns(names, data, parse_columns(args.columns))
    data = _noisy(args, names, data)
    _write(lambda: write_table(args.output, names, data, res.column_units()), args.output)
    events = res.info.get("events")
    if events is not None and args.output != "-":
        path = events_path(args.output)
        _write(lambda: _write_events(path, events), path)


def events_path(output: str) -> str:
    """OUT.events.csv for OUT = run.csv, run.parquet, ... (the table's name without its extension)."""
    from pathlib import Path

    out = Path(output)
    return str(out.with_name(out.stem + ".events.csv")) if out.suffix else str(out) + ".events.csv"


def _write_events(path: str, events) -> None:
    import csv

    from ..data.csvio import atomic_path

    with atomic_path(path) as tmp:
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["t", "line", "event", "energy_jump"])
            for t, line, name, jump in zip(events.times, events.lines, events.names, events.energy_jumps):
                w.writerow([repr(float(t)), line, name, "" if jump != jump else repr(float(jump))])


def _print_switches(args, switches) -> None:
    """Switching surfaces: the mode changes, sliding phases (Filippov) and their ends, listed with -v."""
    out = sys.stderr if args.output == "-" else sys.stdout
    slides = sum(1 for _, _, what in switches if what == "sliding")
    print(f"  switching surfaces located: {len(switches)} mode changes" + (f", {slides} sliding phase"
          f"{'s' if slides != 1 else ''} (Filippov)" if slides else ""), file=out)
    if args.verbose:
        for t, text, what in switches[:200]:
            print(f"    t = {t:.15g}  {text}: {what}", file=out)
        if len(switches) > 200:
            print(f"    ... and {len(switches) - 200} more", file=out)


def _print_events(args, events) -> None:
    n = len(events.times)
    where = f" -> {events_path(args.output)}" if args.output != "-" else ""
    out = sys.stderr if args.output == "-" else sys.stdout
    print(f"  events: {n}" + (f", first at t = {events.times[0]:.12g}, last at t = {events.times[-1]:.12g}" if n else "")
          + where, file=out)
    if args.verbose:
        for t, line, name in list(zip(events.times, events.lines, events.names))[:200]:
            print(f"    t = {t:.15g}  {name}", file=out)
        if n > 200:
            print(f"    ... and {n - 200} more (all in the events file)", file=out)
    for note in events.notes[:5]:
        print(f"  note: {note}", file=out)
    if events.terminated:
        term = events.terminated
        print(f"  note: terminated at t = {term['t']:.12g} by {term['name']}", file=out)


def _noisy(args, names, data):
    """--noise SIGMA on the written columns (pdsl.fit.data.add_noise), with a printed note."""
    if args.noise is None:
        return data
    from ..fit.data import add_noise

    seed = args.seed if args.noise_seed is None else args.noise_seed
    print(f"  noise: σ = {args.noise:g} on every column but t and traj (seed {seed}"
          + (", first samples exact)" if args.noise_spare_t0 else ")"), file=sys.stderr if args.output == "-" else sys.stdout)
    return add_noise(names, data, args.noise, seed, args.noise_spare_t0)


def _sampler(args, m, num, p):
    """The sampling statements of --sample-file / --sample, else FILE.sample beside the model (none with --random-scale)."""
    from pathlib import Path

    from ..sim.sampling import build_sampler, statements_from_file, statements_from_options

    statements, sources = [], []
    if args.sample_file:
        statements += statements_from_file(args.sample_file)
        sources.append(args.sample_file)
    if args.sample:
        statements += statements_from_options(args.sample)
        sources.append("--sample")
    if not statements and args.random_scale is None:
        beside = Path(args.file).with_suffix(".sample")
        if beside.is_file():
            statements, sources = statements_from_file(beside), [str(beside)]
    if not statements:
        return None
    if args.random_scale is not None:
        raise PdslError.at("BadOption", "--random-scale applies to the generic perturbation: with sampling statements "
                           "the statements define the draws", hint="drop --random-scale, or drop --sample/--sample-file")
    return build_sampler(statements, num, p, m.consts, " and ".join(sources))


def _energy_line(res) -> str:
    """Conservative models: the drift |E(t) − E(0)|. Driven or damped ones (power flows in or
    out): the balance E(t) − E(0) − ∫ P dt with P = supplied − dissipated power, which is ~0."""
    import numpy as np

    from ..sim.simulate import energy_balance

    E = res.energy
    e0 = float(E[0])
    scale = float(np.abs(E).max())
    events = res.info.get("events")
    if events is not None and events.times:
        return _energy_line_events(res, events)
    exchanged = 0.0
    if res.power is not None and len(res.t) > 1:
        exchanged = float(np.sum(0.5 * (np.abs(res.power[1:]) + np.abs(res.power[:-1])) * np.diff(res.t)))
    if exchanged <= 1e-8 * max(scale, 1e-300):
        drift = float(np.abs(E - e0).max())
        rel = f"relative {drift / abs(e0):.3e}" if abs(e0) > 1e-12 * scale else "E(0) ≈ 0: no relative drift"
        return f"  energy: E(0) = {e0:.10g}, max |E(t) − E(0)| = {drift:.3e} ({rel})"
    integral, residual = energy_balance(res.t, E, res.power, res.power_integral)
    worst = float(np.abs(residual).max())
    how = (f"∫ integrated with the states: {res.info['power_integral']}" if res.power_integral is not None
           else "∫ by Simpson on the output grid")
    return (f"  energy balance: E(t) − E(0) − ∫(supplied − dissipated) dt: max {worst:.3e} "
            f"(relative to the energy exchanged, {exchanged:.4g}: {worst / exchanged:.1e}; {how}); "
            f"E(0) = {e0:.10g}, E(end) − E(0) = {float(E[-1]) - e0:.6g}, net supplied − dissipated = {float(integral[-1]):.6g}")


def _energy_line_events(res, events) -> str:
    """A model with events: the energy the events changed (E⁺ − E⁻ at each), reported apart from the drift between
    them (rows at an event instant are left out of the drift: before or after is ambiguous there)."""
    import numpy as np

    t, E = res.t, res.energy
    te = np.asarray(events.times, dtype=float)
    jumps = np.nan_to_num(np.asarray(events.energy_jumps, dtype=float))
    tol = 1e-12 * max(1.0, float(np.abs(t).max()))
    at_event = np.array([bool(np.any(np.abs(te - ti) <= tol)) for ti in t])
    jumped = np.array([jumps[te < ti].sum() for ti in t])
    keep = ~at_event
    drift = float(np.abs(E[keep] - E[0] - jumped[keep]).max()) if keep.any() else 0.0
    exchanged = 0.0
    if res.power is not None and len(t) > 1:
        exchanged = float(np.sum(0.5 * (np.abs(res.power[1:]) + np.abs(res.power[:-1])) * np.abs(np.diff(t))))
    if exchanged > 1e-8 * max(float(np.abs(E).max()), 1e-300):  # power flows: the balance, events apart
        dt = np.diff(t)
        integral = np.concatenate([[0.0], np.cumsum(0.5 * (res.power[1:] + res.power[:-1]) * dt)])
        resid = E - E[0] - jumped - integral
        worst = float(np.abs(resid[keep]).max()) if keep.any() else 0.0
        return (f"  energy: E(0) = {E[0]:.10g}; changed by the {len(te)} event{'s' if len(te) != 1 else ''}: "
                f"{jumps.sum():.6g} in all; balance between events: max |E(t) − E(0) − Σ ΔE(events) − ∫P dt| = "
                f"{worst:.3e} (∫ by the trapezoid rule on the output grid, {exchanged:.3g} exchanged)")
    return (f"  energy: E(0) = {E[0]:.10g}; changed by the {len(te)} event{'s' if len(te) != 1 else ''}: "
            f"{jumps.sum():.6g} in all; drift between events: max |E(t) − E(0) − Σ ΔE(events)| = {drift:.3e}")


def _print_auto(info) -> None:
    """--integrator auto: the integrator it chose and why, and where DOP853 handed over to CVODES (pdsl.sim.auto)."""
    if info.get("auto"):
        print(f"  integrator: auto: {info['auto']}")
    for sw in info.get("stiff_switch", ()):
        print(f"  integrator: DOP853 {sw['why']}: {sw['to']} from there (right-hand side: {sw['rhs']})")


def _print_baumgarte(info) -> None:
    gains = info.get("baumgarte")
    if gains is not None:
        print(f"  Baumgarte stabilisation: α = {gains.alpha:.4g}, β = {gains.beta:.4g} ({gains.how})")


def _simulate_random(args, m, num, grid, init, params, inputs) -> int:
    import numpy as np

    from ..data.csvio import write_table
    from ..sim.initial import initial_state, random_initial_states, sampled_initial_states
    from ..sim.simulate import MAX_OUTPUT_ROWS, simulate_batch

    if args.threads < 1:
        raise PdslError.at("BadOption", f"--threads must be at least 1, got {args.threads}")
    p = num.param_vector(params)
    base = initial_state(num, init, p)
    if args.init_data is not None:
        if args.sample or args.sample_file or args.random_scale is not None:
            raise PdslError.at("BadOption", "--sample, --sample-file and --random-scale need --random-init N, not --init-data")
        sampler = None
        raw, x0s = _initial_states_from_csv(args.init_data, num, init, p)
    else:
        sampler = _sampler(args, m, num, p)
    if args.init_data is not None:
        pass  # x0s read above
    elif sampler is not None:
        drawn = sampled_initial_states(num, sampler, base, p, args.random_init, args.seed)
        x0s = drawn.x
    else:
        scale = 0.2 if args.random_scale is None else args.random_scale
        x0s = random_initial_states(num, base, p, args.random_init, args.seed, scale)
    if len(x0s) * len(grid) > MAX_OUTPUT_ROWS:
        raise PdslError.at("BadOption", f"{len(x0s)} trajectories × {len(grid)} samples is {len(x0s) * len(grid):,} rows: "
                           f"at most {MAX_OUTPUT_ROWS:,} rows are written",
                           hint="increase --dt, or simulate fewer trajectories per run")
    runs = simulate_batch(num, grid, x0s, params=params, inputs=inputs, rtol=args.rtol, atol=args.atol,
                          integrator=args.integrator, substeps=args.substeps, stabilize=args.stabilize,
                          threads=args.threads, baumgarte_alpha=args.baumgarte_alpha, baumgarte_beta=args.baumgarte_beta,
                          compile=args.compile, switches=args.switches)
    names, _ = runs[0].columns()
    data = np.vstack([np.column_stack([np.full(len(r.t), k), r.columns()[1]]) for k, r in enumerate(runs)])
    names = ["traj", *names]
    if args.columns:
        from ..data.formats import parse_columns, select_columns

        names, data = select_columns(names, data, parse_columns(args.columns))
    data = _noisy(args, names, data)
    _write(lambda: write_table(args.output, names, data, runs[0].column_units()), args.output)
    origin = f"initial states from {args.init_data}" if args.init_data is not None else f"seed {args.seed}"
    print(f"{m.name}: {len(runs)} trajectories × {len(grid)} samples ({origin}) -> {args.output}")
    if runs[0].info.get("rhs"):  # pdsl.sim.compiled: VM or compiled C, and why
        print(f"  right-hand side: {runs[0].info['rhs']}")
    if args.init_data is not None:
        moved = float(np.max(np.abs(x0s - raw)))
        if num.invariants.size1_out(0):
            print(f"  initial states: {len(x0s)} rows, projected onto the constraints (moved by at most {moved:.3g})")
    elif sampler is not None:
        moved = f"; projection onto the constraints moved them by at most {drawn.max_change:.3g}" \
            if num.invariants.size1_out(0) else ""
        print(f"  initial states: {len(sampler.targets)} values drawn by {sampler.source}{moved}")
    else:
        print(f"  initial states: start state + {scale:g}·N(0, 1) on every state, projected onto the constraints")
    _print_baumgarte(runs[0].info)
    if runs[0].energy is not None:
        drift = max(float(np.max(np.abs(r.energy - r.energy[0]))) for r in runs)
        print(f"  energy: max |E(t) − E(0)| over all trajectories = {drift:.3e}")
    if runs[0].constraint_rms is not None:
        print(f"  constraint violation: max RMS over all trajectories {max(r.constraint_rms.max() for r in runs):.3e}")
    return EXIT_OK


def _initial_states_from_csv(path, num, init, p):
    """``(raw, projected)``: rows of a CSV as initial states, each overriding the start (and --init) where it has a column."""
    import numpy as np

    from ..data.csvio import cell_span, read_table, shown_value
    from ..diagnostics import Span
    from ..sim.initial import Projector, initial_state

    from ..data.units import to_model_units

    table = to_model_units(read_table(path), dict(num.system.units))
    known = set(num.x_names) | set(num.report_names)
    for k, name in enumerate(table.columns):
        if name not in known:
            names = list(dict.fromkeys([*num.x_names, *num.report_names]))
            raise PdslError.at("BadCsv", f"column `{shown_value(name)}` is not a state of {num.system.name}",
                               cell_span(table.path, 1, k), "states: " + ", ".join(names))
    if len(table.data) == 0:
        raise PdslError.at("BadCsv", f"{path} has a header but no rows", Span.point(table.path, 1, 1),
                           hint="one initial state per row")
    if len(table.data) > 100_000:
        raise PdslError.at("BadCsv", f"{path} has {len(table.data)} rows; at most 100000 initial states",
                           Span.point(table.path, 100_002, 1))
    raw = np.array([initial_state(num, {**init, **dict(zip(table.columns, map(float, row)))}, p) for row in table.data])
    if num.invariants.size1_out(0) == 0:
        return raw, raw
    proj = Projector(num)
    return raw, np.array([proj.project(x, p).x for x in raw])


def _write(fn, path):
    try:
        fn()
    except OSError as exc:
        raise PdslError.at("CannotWrite", f"cannot write {path}: {exc.strerror or exc}") from None


def cmd_compile(args) -> int:
    from ..compile.targets import compile_to
    from ..pipeline import compile_model

    compiled = compile_model(args.file, compile_options(args))
    m, num = compiled.model, compiled.numeric
    if args.params:
        from ..fit.run import apply_fitted

        num = apply_fitted(num, args.params)
    files = []
    experiment = None
    if args.t_end is not None or args.dt is not None:
        from ..compile.fmu import DEFAULT_STOP_TIME, Experiment

        experiment = Experiment(args.t_end if args.t_end is not None else DEFAULT_STOP_TIME, args.dt)
    # a line per phase of a long build (an FMU's compiler run), on a terminal or with -v
    progress = (lambda msg: print(f"  {msg}", file=sys.stderr, flush=True)) \
        if (args.verbose or sys.stderr.isatty()) and not getattr(args, "summary_quiet", False) else None
    _write(lambda: files.extend(compile_to(num, args.target, args.output, experiment=experiment, progress=progress)),
           args.output)
    print(f"{m.name}: {args.target} target, {len(files)} files -> {args.output}")
    for f in files:
        print(f"  {f}")
    sw = num.hybrid.switches if num.hybrid is not None else None
    if sw is not None:  # LANGUAGE.md §11: the targets evaluate the switches as written; no modes, no sliding
        print(f"  note: the {args.target} target evaluates the {sw.n} switching function"
              f"{'s' if sw.n != 1 else ''} of the model ({', '.join(sw.texts[:3])}{', …' if sw.n > 3 else ''}) as "
              "written: a solver steps through them; sliding modes (Filippov) are not yet supported in compiled "
              "targets and FMUs")
    return EXIT_OK


def cmd_fit(args) -> int:
    from . import fit_cmd

    return fit_cmd.cmd_fit(args)


def cmd_evaluate(args) -> int:
    from . import fit_cmd

    return fit_cmd.cmd_evaluate(args)


def cmd_sweep(args) -> int:
    from . import sweep_cmd

    return sweep_cmd.cmd_sweep(args)


def cmd_linearize(args) -> int:
    from . import linearize_cmd

    return linearize_cmd.cmd_linearize(args)


def cmd_completion(args) -> int:
    from .completion import script

    sys.stdout.write(script(build_parser(), args.shell))
    return EXIT_OK


COMMANDS = {
    "check": cmd_check, "show": cmd_show, "simulate": cmd_simulate, "compile": cmd_compile,
    "fit": cmd_fit, "evaluate": cmd_evaluate, "sweep": cmd_sweep, "linearize": cmd_linearize,
    "completion": cmd_completion,
}


def _run_command(args) -> int:
    """Run the command; -q drops the summary, ``-o -`` sends it to standard error (the data owns standard output)."""
    import contextlib
    import os
    import time

    from ..data.formats import summary_to_stderr

    if getattr(args, "output", None) == "-" and args.command != "simulate":
        raise PdslError.at("BadOption", f"-o -: `pdsl {args.command}` writes files into a directory, not to standard output",
                           hint="`-o -` (CSV on standard output) is for `pdsl simulate`")
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        store = _model_cache(args)
        stack.enter_context(_cache_scope(store))
        if getattr(args, "output", None) == "-" and args.command == "simulate":
            stack.enter_context(summary_to_stderr())
        if args.summary_quiet:
            null = stack.enter_context(open(os.devnull, "w", encoding="utf-8"))
            stack.enter_context(contextlib.redirect_stdout(null))
        code = COMMANDS[args.command](args)
    if args.verbose:
        cached = f" (compiled-model cache: {store.last})" if store is not None and store.last else ""
        print(f"pdsl {args.command}: {time.perf_counter() - start:.3f} s{cached}", file=sys.stderr)
    return code


def _model_cache(args):
    """The compiled-model cache of this run (pdsl.cache), or None with --no-cache / PDSL_NO_CACHE."""
    import os

    if getattr(args, "no_cache", False) or os.environ.get("PDSL_NO_CACHE", "").strip() not in ("", "0"):
        return None
    from ..cache import ModelCache

    return ModelCache()


def _cache_scope(store):
    from ..cache import using

    return using(store)


EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command ended by Ctrl-C


class _Sigint:
    """Ctrl-C while a command runs. The handler remembers it, then raises ``KeyboardInterrupt`` as Python's
    own does; libraries that catch that on the way cannot hide it — CasADi turns it, raised in a CVODES
    right-hand side or an IPOPT callback, into a ``RuntimeError`` that pdsl would report as an
    IntegratorFailure (exit 2) or an internal error (exit 1). :func:`main` reports any error that follows a
    Ctrl-C as the interruption it is: one line ``interrupted``, exit 130."""

    seen = False

    @classmethod
    def handler(cls, signum, frame):
        cls.seen = True
        raise KeyboardInterrupt

    @classmethod
    @contextmanager
    def watching(cls):
        """The handler for the duration of a command; the previous one afterwards. Nothing changes outside
        the main thread, nor where SIGINT is ignored (a background job) or handled by someone else."""
        import signal
        import threading

        cls.seen = False
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.getsignal(signal.SIGINT)
        if previous is not signal.default_int_handler:
            yield
            return
        signal.signal(signal.SIGINT, cls.handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)


def _interrupted() -> int:
    """The end of an interrupted command: further Ctrl-C ignored while this line is written."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is _Sigint.handler:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # restored by _Sigint.watching
    try:
        print("interrupted", file=sys.stderr)
    except (OSError, ValueError):
        pass
    return EXIT_INTERRUPTED


def main(argv: list[str] | None = None) -> int:
    """The command of ``argv``; its exit code (0 ok, 2 user error, 1 internal error, 130 interrupted)."""
    try:
        with _Sigint.watching():
            try:
                return _main(argv)
            except KeyboardInterrupt:
                return _interrupted()
    except KeyboardInterrupt:  # a second Ctrl-C before the handler was in place or put back
        return EXIT_INTERRUPTED


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or "-vv" in argv or argv.count("-v") + argv.count("--verbose") >= 2
    try:
        args = build_parser().parse_args(argv)
        args.verbose += getattr(args, "verbose_after", 0)  # -v before and after the command add up
        if args.version:
            from .. import __version__

            print(f"pdsl {__version__}")
            return EXIT_OK
        if args.command is None:
            build_parser().print_help()
            return EXIT_USER
        from .. import quiet  # standard library only

        quiet.set_passthrough(args.verbose >= 2)  # -vv: what CasADi, SUNDIALS and IPOPT print reaches the terminal
        quiet.take_note()  # the note of this command only
        from .startup import defer_sympy_tensor

        defer_sympy_tensor()  # ~30 ms of sympy.combinatorics no model needs (pdsl.cli.startup)
        code = _run_command(args)
        _solver_note()
        return code
    except PdslError as err:
        if _Sigint.seen:  # a Ctrl-C that a solver turned into a failure (CVODES: "rhs failed: KeyboardInterrupt")
            return _interrupted()
        print(render(err.diagnostics, color=_color()), file=sys.stderr)
        _solver_note()
        return EXIT_USER
    except KeyboardInterrupt:
        return _interrupted()
    except BrokenPipeError:  # output piped into `head` and the like
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception:  # noqa: BLE001 - the one place internal errors are reported
        if _Sigint.seen:  # a Ctrl-C that a library turned into another exception
            return _interrupted()
        if debug:
            traceback.print_exc()
        else:
            exc = sys.exc_info()[1]
            print(f"internal error: {type(exc).__name__}: {exc}\n(this is a bug in pdsl; run with --debug for the traceback)", file=sys.stderr)
        _solver_note()
        return EXIT_INTERNAL


def _color() -> bool:
    """Colour in diagnostics: on a terminal, unless NO_COLOR is set (pdsl.terminal)."""
    from ..terminal import color

    return color(sys.stderr)


def _solver_note() -> None:
    """Once per command, after its result or its error: how many lines the numerical solvers printed while pdsl
    kept them off the terminal (pdsl.quiet), with the first and the last."""
    quiet = sys.modules.get("pdsl.quiet")  # not imported: no solver ran
    if quiet is None:
        return
    try:
        text = quiet.take_note()
        if text:
            print(text, file=sys.stderr)
    except (OSError, ValueError):  # standard error closed: nothing to tell
        pass


def entry() -> None:
    """The console script (and ``python -m pdsl``): :func:`main`, then :func:`fast_exit`.

    The cyclic garbage collector runs far less often than Python's default (every 700 net allocations):
    importing sympy and building expressions allocates millions of objects and almost none is garbage, so the
    default spends ~12 % of a short command's time scanning them (as mypy, pdsl sets a high first threshold;
    measured in benchmarks/bench_startup_scale.py)."""
    import gc

    gc.set_threshold(*GC_THRESHOLDS)
    try:
        code = main()
    except KeyboardInterrupt:  # between main's return and its caller: nothing is left to do
        code = EXIT_INTERRUPTED
    fast_exit(code)


GC_THRESHOLDS = (100_000, 20, 20)


def fast_exit(code: int) -> None:
    """End the process with ``code`` without the interpreter's teardown.

    Finalising the modules of sympy, numpy and CasADi and freeing their objects takes 0.1–0.2 s of a
    0.5 s command (measured on `pdsl simulate`), and nothing of it is needed once :func:`main` has
    returned. What a normal exit does that matters is done here first: the standard streams are
    flushed and the ``atexit`` handlers run (logging, temporary directories, ray). Files pdsl writes
    are closed before they are renamed into place (:mod:`pdsl.data.csvio`), so none is half-written.
    While a non-daemon thread is still alive the normal exit runs, which waits for it."""
    import os
    import threading

    import signal

    late = []  # a Ctrl-C during this teardown is remembered, not raised into it (a traceback); a second one ends it

    def on_sigint(signum, frame):
        if late:
            os._exit(EXIT_INTERRUPTED)
        late.append(signum)

    if signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, None):
        signal.signal(signal.SIGINT, on_sigint)
    main_thread = threading.main_thread()
    if any(t is not main_thread and t.is_alive() and not t.daemon for t in threading.enumerate()):
        sys.exit(code)
    import atexit

    atexit._run_exitfuncs()
    if late and code != EXIT_INTERRUPTED:
        code = _interrupted()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BrokenPipeError:  # output piped into `head` and the like: what was read is all that is wanted
            pass
        except (OSError, ValueError):
            code = code or EXIT_INTERNAL
    os._exit(code)
