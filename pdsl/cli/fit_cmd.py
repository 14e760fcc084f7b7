"""`pdsl fit` and `pdsl evaluate`: argument parsers and command bodies (heavy imports inside).

Settings come from flags, then a ``--config`` TOML file, then defaults (see
:mod:`pdsl.fit.config`); the work is done by :mod:`pdsl.fit.run` and :mod:`pdsl.fit.evaluate`.
"""

from __future__ import annotations

from ..diagnostics import PdslError
from ..options import finite_float, integer
from .common import EXIT_OK, compile_options, consts, write_guarded

# settings whose flags are not the field's value as given (lists, tables, key by key): built in _config
_COMPOSITE = {"free", "observe", "profile", "param", "map", "input", "noise", "plots", "equilibrium", "sparsity",
              "constraints", "momentum"}


def _plain_overrides(args) -> dict:
    """Every FitPlan field whose flag (``--`` + the field name) was given: the flags are declared by the plan's
    fields, not by a table (a flag whose destination is not a field is not a setting)."""
    from dataclasses import fields

    from ..fit.config import FitPlan

    return {f.name: getattr(args, f.name) for f in fields(FitPlan)
            if f.name not in _COMPOSITE and getattr(args, f.name, None) is not None}


def _data_flags(p) -> None:
    """--map and --input: shared by fit and evaluate (measured data, issue 16)."""
    p.add_argument("--map", action="append", default=[], metavar="FILE=NAME,...",
                   help="rename data columns: time=t, run=traj, angle=theta, ... (repeatable)")
    p.add_argument("--input", action="append", default=[], metavar="NAME=EXPR",
                   help="an exogenous input that is not a data column, as an expression of t (repeatable)")


def add_parsers(sub, common) -> None:
    p = sub.add_parser("fit", help="fit free parameters and neural components to trajectory CSVs")
    common(p)
    p.add_argument("--data", help="trajectory CSV (the format `simulate` writes; several trajectories via a traj column)")
    p.add_argument("--free", help="comma-separated parameters to fit (in addition to those marked {free})")
    p.add_argument("--profile", metavar="NAME,...", help="profile-likelihood intervals of these free parameters, "
                   "reported next to the linear error bars (refits with each held at stepped values)")
    p.add_argument("--config", help="experiment file (TOML); flags override it")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output directory")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in the output directory")
    p.add_argument("--init", metavar="PARAMS.json",
                   help="start from a previous fit (its params.json and networks.npz), e.g. longer chunks after shorter ones")
    p.add_argument("--method", choices=("auto", "gauss-newton", "ipopt", "adamw"), help="auto (default: gauss-newton without networks, else adamw) | gauss-newton | ipopt | adamw")
    p.add_argument("--shooting", choices=("single", "multiple"), help="single (default: independent chunks) | multiple (each trajectory as segments of "
                                      "--chunk steps linked by continuity constraints; solved by ipopt)")
    p.add_argument("--hessian", choices=("gauss-newton", "exact", "limited-memory"), help="ipopt: gauss-newton (default: 2·JᵀJ of the residuals) | exact | limited-memory")
    p.add_argument("--epochs", type=integer, help="epochs (default 50 for gauss-newton, 200 ipopt iterations, 2000 for adamw)")
    p.add_argument("--chunk", type=integer, help="steps per training chunk (default: physical parameters by Gauss–Newton: whole trajectories, reached in "
                   "stages of longer windows; with networks 4)")
    p.add_argument("--stride", type=integer, help="samples between chunk starts (default: the chunk length)")
    p.add_argument("--batch", type=integer, help="chunks per minibatch (default 200)")
    p.add_argument("--integrator", help="rk4 (default) | midpoint | gauss2 | euler")
    p.add_argument("--switches", choices=("step-through", "locate"),
                   help="switching surfaces on the state (`if` on states, sign): step-through (default) | locate (each "
                        "step locates the surface it crosses, Filippov sliding; gradients include the switching-time term)")
    p.add_argument("--substeps", type=integer, help="integrator steps per data interval (default: physical parameters: chosen from the sample "
                   "spacing and the model's time scales, reported; with networks 1)")
    p.add_argument("--project", type=integer, metavar="STEPS",
                   help="Newton steps projecting each chunk's first sample onto the constraints (default 0: none)")
    p.add_argument("--loss", help="mse (gauss-newton, ipopt default) | huber, soft-l1 (robust: gauss-newton, ipopt; scale "
                   "from --noise) | l1 (adamw default)")
    p.add_argument("--lr", type=finite_float, help="AdamW learning rate (default 3e-3)")
    p.add_argument("--weight-decay", type=finite_float, help="AdamW weight decay on networks (default 1e-4)")
    p.add_argument("--seed", type=integer, help="seed of the validation split, minibatches and network init (default 0)")
    p.add_argument("--val-fraction", type=finite_float, help="fraction of trajectories held out for validation (default: 0.2 with networks, 0 for "
                   "physical parameters alone)")
    p.add_argument("--observe", help="comma-separated columns the loss compares (default: all state and output columns)")
    _data_flags(p)
    p.add_argument("--noise", action="append", default=[], metavar="COL=SIGMA",
                   help="measurement noise of a column: σ (residuals weighted 1/σ), a relative noise such as 5%%, or the name "
                   "of a data column holding σ per sample (repeatable)")
    p.add_argument("--start", choices=("auto", "data", "estimate"), help="auto (default) | data (chunks start from their first samples) | estimate "
                                   "(every chunk's start state is fitted: unbiased under noise, unmeasured states allowed)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="start value (free) or fixed value")
    p.add_argument("--threads", type=integer, help="threads for the batched chunk loss (default 1)")
    p.add_argument("--backend", choices=("auto", "casadi", "torch"), help="auto (default: torch for networks with adamw) | casadi | torch: how chunk losses are evaluated")
    p.add_argument("--tol", type=finite_float, help="gauss-newton: relative cost decrease that counts as converged")
    g = p.add_argument_group("implicit integrators, precision, training protocol (docs/fit.md)")
    g.add_argument("--implicit-solver", choices=("fpi", "newton"),
                   help="midpoint/gauss2 stage equations: fpi (torch default: RK2 predictor + fixed-point sweeps) | newton")
    g.add_argument("--fpi-iters", type=integer, metavar="N", help="fixed-point sweeps per step (default 6)")
    g.add_argument("--fpi-tol", type=finite_float, metavar="TOL", help="stop the sweeps once a sweep changes the step by less than TOL")
    g.add_argument("--gradient", choices=("adjoint", "unrolled"),
                   help="implicit steps: adjoint (default: discrete adjoint, memory flat in the rollout) | unrolled (backprop through the sweeps)")
    g.add_argument("--dtype", choices=("float64", "float32"), help="torch backend precision (default float64)")
    g.add_argument("--device", help="torch backend device: cpu (default) | cuda | cuda:K")
    g.add_argument("--window", choices=("chunks", "random"),
                   help="chunks (default: every disjoint chunk each epoch) | random (one random window per trajectory per epoch)")
    g.add_argument("--schedule", choices=("cosine", "plateau"), help="adamw learning rate: cosine (default) | plateau (ReduceLROnPlateau)")
    g.add_argument("--warmup", type=integer, metavar="EPOCHS",
                   help="adamw: linear learning-rate warm-up over EPOCHS epochs (lr·(k+1)/EPOCHS in epoch k), then the schedule (default 0)")
    g.add_argument("--patience", type=integer, help="plateau: epochs without improvement before the lr is reduced (default 10)")
    g.add_argument("--factor", type=finite_float, help="plateau: lr reduction factor (default 0.5)")
    g.add_argument("--dropout", type=finite_float, metavar="RATE",
                   help="training only (torch backend): dropout after every hidden layer of every network "
                        "(default: each network's mlp(dropout = …), else 0)")
    g.add_argument("--early-stop", type=integer, metavar="EPOCHS",
                   help="stop when the validation loss has not improved for EPOCHS epochs (best parameters kept)")
    p.add_argument("--formulation", choices=("hamiltonian", "lagrangian"), help="Cartesian mechanics: Eq. 6 or Eq. 7")
    p.add_argument("--stop-after", type=integer, metavar="EPOCHS", help="stop after this many epochs in total; --resume continues")
    g = p.add_argument_group("regularisers (BENCHMARKS C4, C5.2; adamw)")
    g.add_argument("--equilibrium", type=finite_float, metavar="LAMBDA",
                   help="penalty LAMBDA·‖f(z*, u*)‖² forcing an equilibrium at z* (default: all states and inputs 0)")
    g.add_argument("--equilibrium-at", action="append", default=[], metavar="NAME=VALUE",
                   help="a shown state or input of the equilibrium point (repeatable; the others are 0)")
    g.add_argument("--sparsity", metavar="FLOWS",
                   help="comma-separated link flows (p-H element ports such as damper2, or declared outputs) "
                        "whose L1 norm Σ mean|f| over the training samples is penalised")
    g.add_argument("--sparsity-weight", type=finite_float, metavar="W", help="penalty mode: objective J + W·R (default 1e-3)")
    g.add_argument("--sparsity-epsilon", type=finite_float, metavar="EPS",
                   help="primal-dual mode: minimise R subject to J ≤ EPS (C4 Eqs. 12–20)")
    g.add_argument("--dual-step", type=finite_float, metavar="ALPHA", help="primal-dual: λ ← max(0, λ + ALPHA (J − EPS)) per epoch (default 1/EPS)")
    g.add_argument("--dual-start", type=finite_float, metavar="LAMBDA0", help="primal-dual: starting multiplier (default 1)")
    g.add_argument("--constraint-weight", type=finite_float, metavar="W",
                   help="penalty W·mean‖r‖² of the model's constraints at the measured states (learned velocity constraints, "
                        "`constraint learn` / `distribution learn`)")
    g.add_argument("--momentum-weight", type=finite_float, metavar="W",
                   help="add W·(the teacher-forced one-step momentum loss of the rolling-disk paper, Eq. 18) for a model "
                        "with a group and a learned connection")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar (bars are drawn only on a terminal; pdsl -q also drops the summary)")
    p.add_argument("--no-plots", action="store_true", help="do not draw loss.png and validation.png (matplotlib is then "
                   "not imported; the report, history and parameters are written as always)")
    p.add_argument("--track", metavar="TRACKER", help="also log the per-epoch history: tensorboard:DIR, mlflow, or "
                                                     "mlflow:TRACKING_URI (pdsl/fit/tracking.py; docs/interop.md)")

    p = sub.add_parser("evaluate", help="rollout metrics of a model on test trajectories")
    common(p)
    p.add_argument("--data", help="test trajectory CSV (needed unless --energy-grid is given)")
    p.add_argument("--energy-grid", metavar="NAME=LO:HI:N,...",
                   help="Table 1's metric (BENCHMARKS B6): MAE of the model's H against --reference on an evenly spaced "
                        "grid, raw and offset-corrected, e.g. q=-2:2:101,p=-2:2:101")
    p.add_argument("--reference", metavar="MODEL.phm", help="the reference (true) model: of --energy-grid, or, with --data, "
                   "whose outputs of the same names (learned constraint entries a[1], ...) are compared along the data")
    p.add_argument("--params", help="fitted parameters (JSON written by `pdsl fit`)")
    _data_flags(p)
    p.add_argument("--integrator", default=None, help="auto (default, as for `pdsl simulate`), cvodes, cvodes-bdf, rk4, midpoint, gauss2, euler")
    p.add_argument("--rtol", type=finite_float, default=1e-9, help="relative tolerance of cvodes (default 1e-9)")
    p.add_argument("--substeps", type=integer, default=1, help="fixed-step integrators: steps per sample interval (default 1)")
    p.add_argument("--backend", default="casadi", choices=("casadi", "torch"),
                   help="casadi (default: each trajectory by CasADi) | torch (all at once, rk4/euler; for large networks)")
    p.add_argument("--formulation", default="hamiltonian", choices=("hamiltonian", "lagrangian"),
                   help="Cartesian mechanics: Eq. 6 or Eq. 7")
    p.add_argument("--plot", metavar="OUT.png", help="plot the relative error of every trajectory against time")
    p.add_argument("--json", metavar="OUT.json", help="write the summary as JSON")


def _config(args):
    """The fit plan: the TOML file's settings, then the flags over them, built once (a frozen FitPlan)."""
    from ..fit.config import FitPlan, load_toml, noise_spec
    from ..sim.simulate import parse_assignment, parse_float

    s = load_toml(args.config) if args.config else {}
    s.update(_plain_overrides(args))
    if args.free:
        s["free"] = sorted(set(s.get("free", ())) | {n.strip() for n in args.free.split(",") if n.strip()})
    if args.observe:
        s["observe"] = [n.strip() for n in args.observe.split(",") if n.strip()]
    if args.profile:
        s["profile"] = [n.strip() for n in args.profile.split(",") if n.strip()]
    param = dict(s.get("param") or {})
    for item in args.param:
        name, value = parse_assignment(item, "--param")
        param[name] = parse_float(value, f"--param {name}")
    s["param"] = param
    if args.map:
        s["map"] = {**(s.get("map") or {}), **_column_map(args.map)}
    for item in args.input:
        name, value = parse_assignment(item, "--input")
        s["input"] = {**(s.get("input") or {}), name: value}
    for item in args.noise:
        name, value = parse_assignment(item, "--noise")
        try:
            spec = noise_spec(value)
        except ValueError as exc:
            raise PdslError.at("BadOption", f"--noise {name}: {exc}",
                               hint="σ as a number (0.01), relative (5%), or the name of a column of σ per sample") from None
        s["noise"] = {**(s.get("noise") or {}), name: spec}
    _regularizer_flags(args, s, parse_assignment, parse_float)
    if getattr(args, "no_plots", False):
        s["plots"] = False
    return FitPlan(**s)


def _column_map(items) -> dict:
    from ..data.csvio import parse_column_map

    out: dict = {}
    for item in items:
        out.update(parse_column_map(item))
    return out


def _regularizer_flags(args, s: dict, parse_assignment, parse_float) -> None:
    """--equilibrium*, --sparsity*, --dual-* override the [equilibrium] / [sparsity] tables key by key (in the
    settings ``s`` the plan is built from)."""
    eq = dict(s.get("equilibrium") or {})
    if args.equilibrium is not None:
        eq["weight"] = args.equilibrium
    if args.equilibrium_at:
        at = dict(eq.get("at", {}))
        for item in args.equilibrium_at:
            name, value = parse_assignment(item, "--equilibrium-at")
            at[name] = parse_float(value, f"--equilibrium-at {name}")
        eq["at"] = at
        eq.setdefault("weight", 1.0)
    s["equilibrium"] = eq or None
    sp = dict(s.get("sparsity") or {})
    if args.sparsity:
        sp["flows"] = [n.strip() for n in args.sparsity.split(",") if n.strip()]
    for flag, key in (("sparsity_weight", "weight"), ("sparsity_epsilon", "epsilon"), ("dual_step", "alpha"),
                      ("dual_start", "lambda0")):
        value = getattr(args, flag, None)
        if value is not None:
            sp[key] = value
    if args.sparsity_epsilon is not None:
        sp["mode"] = "primal-dual"
    if sp and not sp.get("flows"):
        raise PdslError.at("BadOption", "sparsity settings without flows", hint="name the flows: --sparsity damper2,link.f")
    s["sparsity"] = sp or None
    if getattr(args, "constraint_weight", None) is not None:
        s["constraints"] = {**(s.get("constraints") or {}), "weight": args.constraint_weight}
    if getattr(args, "momentum_weight", None) is not None:
        s["momentum"] = {**(s.get("momentum") or {}), "weight": args.momentum_weight}


def cmd_fit(args) -> int:
    from ..fit.run import run_fit

    if args.stop_after is not None and args.stop_after < 1:
        raise PdslError.at("BadOption", f"--stop-after must be a positive integer, got {args.stop_after}")
    cfg = _config(args)
    if args.track:
        from ..fit.tracking import check_target

        check_target(args.track)
    summary = run_fit(args.file, args.model, cfg, args.output, resume=args.resume, consts=consts(args.const),
                      stop_after=args.stop_after,
                      progress=not (args.quiet or getattr(args, "summary_quiet", False)))  # fit --quiet, or pdsl -q
    _print_summary(summary, args.output)
    if args.track:
        from dataclasses import asdict

        from ..fit.tracking import export_history

        where = export_history(args.track, summary, asdict(cfg), run_name=summary.get("model"))
        print(f"  history of {summary['epochs']} epochs -> {args.track.split(':')[0]} ({where})")
    return EXIT_OK


def _print_summary(summary: dict, out_dir: str) -> None:
    h = summary["history"]
    per_epoch = sum(h["seconds"]) / max(len(h["seconds"]), 1)
    state = "converged" if summary["converged"] else ("done" if summary["finished"] else "stopped")
    print(f"{summary['model']}: {state} after {summary['epochs']} epochs ({per_epoch:.3g} s per epoch)")
    for name in summary["free"]:
        se = summary["stderr"].get(name)
        undetermined = name in summary["stderr"] and se is None
        print(f"  {name} = {summary['params'][name]:.8g}" + (f" ± {se:.2g}" if se is not None
                                                             else " (not determined)" if undetermined else ""))
    for name, prof in (summary.get("profiles") or {}).items():
        from ..fit.profile import describe

        print(f"  profile: {describe(name, prof)}")
    mf = summary.get("misfit")
    if mf:
        print(f"  misfit: χ²/dof = {mf['ratio']:.4g} ({mf['dof']} degrees of freedom"
              + (", noise as stated by --noise)" if mf["noise_known"] else "; give --noise for every column to check it)"))
    for note in summary.get("notes") or ():
        print(f"  {note}" if note.startswith("warning: ") else f"  note: {note}")
    sat = summary.get("saturation")
    if sat is not None and (sat["stopped"] or summary.get("early_stop")):
        print(f"  validation loss saturated at epoch {sat['epoch']} ({sat['seconds']:.3g} s of training)"
              + ("; stopped early, best parameters kept" if sat["stopped"] else ""))
    if summary.get("solver_status"):
        cont = summary.get("continuity")
        print(f"  ipopt: {summary['solver_status']}" + (f"; max constraint violation {cont:.2e}" if cont is not None else ""))
    val = summary["val_loss"]
    train = summary["train_loss"]
    print("  loss: training " + ("–" if train is None else f"{train:.4e}") + ", validation "
          + ("–" if val is None else f"{val:.4e}"))
    if summary["finished"]:
        print(f"  -> {str(out_dir).rstrip('/') or '/'}/ (params.json, report.md, ...)")
    else:
        print(f"  checkpoint -> {out_dir}/checkpoint.npz; continue with --resume")


def cmd_evaluate(args) -> int:
    from ..fit.data import load_dataset
    from ..fit.evaluate import evaluate, format_table, plot_scores
    from ..fit.run import apply_fitted
    from ..pipeline import compile_model

    if not 0 < args.rtol < 1:
        raise PdslError.at("BadOption", f"--rtol must be between 0 and 1, got {args.rtol}")
    if args.energy_grid is not None and args.reference is None:
        raise PdslError.at("BadOption", "--energy-grid needs --reference (the true model)",
                           hint="e.g. --energy-grid q=-2:2:101,p=-2:2:101 --reference models/double_well.phm")
    if args.reference is not None and args.energy_grid is None and args.data is None:
        raise PdslError.at("BadOption", "--reference compares the model with a reference: on --energy-grid (H) or along "
                           "--data (the outputs both models have)", hint="add --data CSV or --energy-grid ...")
    if args.data is None and args.energy_grid is None:
        raise PdslError.at("BadOption", "evaluate needs --data CSV (rollout metrics) or --energy-grid with --reference")
    compiled = compile_model(args.file, compile_options(args))
    m, num = compiled.model, compiled.numeric
    if args.params:
        num = apply_fitted(num, args.params)
    summary: dict = {}
    if args.energy_grid is not None:
        summary["energy_grid"] = _energy_grid(args, num)
    if args.data is None:
        if args.json:
            _dump_json(args.json, summary)
        return EXIT_OK
    from ..fit.run import fit_inputs
    from ..sim.simulate import parse_assignment

    exprs = dict(parse_assignment(item, "--input") for item in args.input)
    data = load_dataset(args.data, num, columns=_column_map(args.map) or None, inputs=fit_inputs(num, exprs), latent=True)
    if data.latent:
        raise PdslError.at("BadTrajectoryData", f"{args.data}: evaluate rolls out from each first sample; "
                           f"{', '.join(data.latent)} {'is' if len(data.latent) == 1 else 'are'} not measured",
                           hint="evaluate on data with every state column (e.g. from `pdsl simulate`)")
    if args.substeps < 1:
        raise PdslError.at("BadOption", f"--substeps must be a positive integer, got {args.substeps}")
    scores, rollout = evaluate(num, data, integrator=args.integrator, rtol=args.rtol, substeps=args.substeps,
                               backend=args.backend)
    print(f"{m.name}: {len(scores)} trajectories of {args.data}, rollouts from each first sample")
    print(format_table(rollout))
    summary = {**rollout, **summary}
    if args.reference is not None and args.energy_grid is None:
        summary["reference"] = _reference_outputs(args, num, data, exprs)
    if args.json:
        _dump_json(args.json, summary)
    if args.plot:
        write_guarded(lambda: plot_scores(args.plot, scores, f"{m.name}: bounded relative error"), args.plot)
        print(f"  plot -> {args.plot}")
    return EXIT_OK


def _reference_outputs(args, num, data, exprs) -> dict:
    """--data with --reference: the outputs both models have, compared along the data (no rollout)."""
    from ..fit.data import load_dataset
    from ..fit.reference import compare_outputs
    from ..fit.run import fit_inputs
    from ..pipeline import CompileOptions, compile_model

    ref = compile_model(args.reference, CompileOptions(formulation=getattr(args, "formulation", "hamiltonian"))).numeric
    ref_data = load_dataset(args.data, ref, columns=_column_map(args.map) or None, inputs=fit_inputs(ref, exprs), latent=True)
    found = compare_outputs(num, ref, data, ref_data)
    print(f"outputs along the data against {ref.system.name} ({args.reference}):")
    print("| output | RMSE | max error | reference range |")
    print("|---|---|---|---|")
    for c in found:
        print(f"| `{c.name}` | {c.rmse:.4e} | {c.max_abs:.4e} | {c.ref_range:.4g} |")
    return {c.name: c.to_dict() for c in found}


def _dump_json(path, summary: dict) -> None:
    import json

    from ..data.csvio import atomic_path

    from ..fit.run import _strict

    def dump():  # strict JSON: a diverged trajectory's inf/NaN metrics are null (its `diverged` entry says why)
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(_strict(summary), indent=2, allow_nan=False) + "\n", encoding="utf-8")

    write_guarded(dump, path)
    print(f"  summary -> {path}")


def _energy_grid(args, num) -> dict:
    """--energy-grid with --reference: print and return the raw and offset-corrected MAE of H."""
    from ..fit.energy_grid import energy_on_grid, grid_errors, parse_grid
    from ..pipeline import CompileOptions, compile_model

    grid = parse_grid(args.energy_grid, num.x_names)
    ref = compile_model(args.reference, CompileOptions(formulation=getattr(args, "formulation", "hamiltonian"))).numeric
    H = energy_on_grid(num, grid, "the model")
    H_ref = energy_on_grid(ref, grid, "the reference")
    err = grid_errors(H, H_ref)
    shape = " x ".join(str(len(grid[n])) for n in num.x_names)
    print(f"{num.system.name} vs {ref.system.name}: H on a {shape} grid ({err.points} points)")
    print(f"  MAE of H: raw {err.mae:.4e}; offset-corrected {err.mae_offset_corrected:.4e} "
          f"(offset mean(H − H_ref) = {err.offset:.4e}; max |error| after the offset {err.max_offset_corrected:.4e})")
    return err.to_dict()
