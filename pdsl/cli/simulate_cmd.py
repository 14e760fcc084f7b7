"""``pdsl simulate``: integrate a model (one run, or a batch of initial states) and write its table, plots and summary."""

from __future__ import annotations

import sys

from ..diagnostics import PdslError
from .common import DEFAULT_INTERVALS, EXIT_OK, compile_options, write_guarded


def cmd_simulate(args) -> int:
    from ..backend.functions import to_casadi
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

        write_guarded(lambda: plot_states(res, args.plot, title=m.name), args.plot)
        print(f"  plot -> {args.plot}")
    if getattr(args, "animate", None):
        from ..sim.plot import animate_bodies

        write_guarded(lambda: animate_bodies(res, system, args.animate), args.animate)
        print(f"  animation -> {args.animate}")
    return EXIT_OK


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
    write_guarded(lambda: write_table(args.output, names, data, res.column_units()), args.output)
    events = res.info.get("events")
    if events is not None and args.output != "-":
        path = events_path(args.output)
        write_guarded(lambda: _write_events(path, events), path)


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
    write_guarded(lambda: write_table(args.output, names, data, runs[0].column_units()), args.output)
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

