"""`pdsl sweep`: parameter grids, random samples or TOML member lists; simulations or fits (pdsl/sweep.py)."""

from __future__ import annotations

from ..diagnostics import PdslError
from ..options import finite_float, integer
from .choices import FORMULATIONS, INTEGRATORS
from .common import EXIT_OK, consts


def add_parser(sub, common) -> None:
    p = sub.add_parser("sweep", help="run many simulations or fits of one model over parameter values "
                                     "(a grid, random samples or a TOML list), serially, in a process pool or on Ray")
    common(p)
    g = p.add_argument_group("members")
    g.add_argument("--grid", action="append", default=[], metavar="NAME=START:STOP:N",
                   help="N values from START to STOP (or NAME=v1,v2,...); several --grid make a product")
    g.add_argument("--random", action="append", default=[], metavar="NAME=LOW:HIGH",
                   help="uniform draws of NAME in [LOW, HIGH] (with --samples)")
    g.add_argument("--samples", type=integer, default=None, help="number of random members (with --random)")
    g.add_argument("--members", metavar="FILE.toml", help="[[member]] tables of parameter values (and seed)")
    g.add_argument("--seed", type=integer, default=0,
                   help="seed of --random; a random or listed member k gets SEED + k unless it sets its own")
    p.add_argument("--mode", choices=("simulate", "fit"), default="simulate", help="what each member does")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a parameter value every member shares (a fit's start value)")
    p.add_argument("--formulation", choices=FORMULATIONS, default="hamiltonian",
                   help="Cartesian mechanics: Eq. 6 or Eq. 7")
    s = p.add_argument_group("simulate")
    s.add_argument("--t-end", type=finite_float, default=None, help="final time (simulate)")
    s.add_argument("--dt", type=finite_float, default=None, help="output sampling interval (simulate)")
    s.add_argument("--init", action="append", default=[], metavar="NAME=VALUE", help="initial value of a state")
    s.add_argument("--rtol", type=finite_float, default=1e-8, help="relative tolerance (cvodes, idas)")
    s.add_argument("--atol", type=finite_float, default=None, help="absolute tolerance (default rtol/100)")
    s.add_argument("--integrator", default=None, choices=INTEGRATORS, help="as for `pdsl simulate`")
    s.add_argument("--substeps", type=integer, default=1, help="fixed-step schemes: steps per output interval")
    f = p.add_argument_group("fit")
    f.add_argument("--data", help="trajectory table every member fits (fit)")
    f.add_argument("--free", help="comma-separated parameters to fit")
    f.add_argument("--config", help="experiment file (TOML) of `pdsl fit`; --data/--free/--epochs/--method override it")
    f.add_argument("--epochs", type=integer, default=None, help="epochs per fit")
    f.add_argument("--method", choices=("auto", "gauss-newton", "ipopt", "adamw"), default=None, help="fit method")
    x = p.add_argument_group("execution")
    x.add_argument("--executor", choices=("process", "ray"), default="process",
                   help="process: this machine (1 worker: serially in this process); ray: Ray actors")
    x.add_argument("--workers", type=integer, default=1, help="worker processes or Ray actors")
    x.add_argument("--address", default=None, help="Ray cluster address for ray.init(address=...) (default: start Ray here)")
    p.add_argument("--plot", action="store_true", help="also write summary.png (each result against the first parameter)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output directory (re-running resumes it)")


def _members(args):
    from ..sweep import grid_members, members_from_toml, parse_grid, parse_range, random_members

    given = [bool(args.grid), bool(args.random), bool(args.members)]
    if sum(given) != 1:
        raise PdslError.at("BadOption", "give exactly one of --grid, --random (with --samples), --members",
                           hint="e.g. --grid m1=0.5:2:100")
    if args.random:
        if args.samples is None:
            raise PdslError.at("BadOption", "--random needs --samples N")
        ranges = []
        for item in args.random:
            name, spec = parse_range(item, "--random")
            parts = spec.split(":")
            if len(parts) != 2:
                raise PdslError.at("BadOption", f"--random {name}={spec}: expected LOW:HIGH")
            from ..sim.simulate import parse_float

            lo, hi = (parse_float(v, f"--random {name}") for v in parts)
            if not lo < hi:
                raise PdslError.at("BadOption", f"--random {name}: LOW must be below HIGH, got {lo}:{hi}")
            ranges.append((name, lo, hi))
        return random_members(ranges, args.samples, args.seed)
    if args.samples is not None:
        raise PdslError.at("BadOption", "--samples goes with --random")
    if args.members:
        return members_from_toml(args.members, args.seed)
    return grid_members([parse_grid(g) for g in args.grid], args.seed)


def _assignments(items, option):
    from ..sim.simulate import parse_assignment, parse_float

    out = {}
    for item in items:
        name, value = parse_assignment(item, option)
        out[name] = parse_float(value, f"{option} {name}")
    return out


def task_from_args(args):
    from ..sweep import SweepTask

    fit = None
    if args.mode == "simulate":
        if args.t_end is None or args.dt is None:
            raise PdslError.at("BadOption", "a simulate sweep needs --t-end and --dt")
        if args.data or args.free or args.config:
            raise PdslError.at("BadOption", "--data, --free and --config belong to --mode fit")
    else:
        from ..fit.config import FitConfig, load_toml

        cfg = load_toml(args.config) if args.config else {}
        if args.data:
            cfg["data"] = args.data
        if cfg.get("data"):  # workers (Ray actors) may run in another directory
            from pathlib import Path

            cfg["data"] = str(Path(cfg["data"]).resolve())
        if args.free:
            cfg["free"] = sorted({n.strip() for n in args.free.split(",") if n.strip()})
        if args.epochs is not None:
            cfg["epochs"] = args.epochs
        if args.method is not None:
            cfg["method"] = args.method
        cfg["formulation"] = args.formulation
        FitConfig(**cfg)  # unknown keys fail here, before any member runs
        if not cfg.get("data"):
            raise PdslError.at("BadOption", "a fit sweep needs --data (or `data` in --config)")
        fit = cfg
    from pathlib import Path

    return SweepTask(model_path=str(Path(args.file).resolve()), model_name=args.model, consts=consts(args.const),
                     formulation=args.formulation, mode=args.mode, t_end=args.t_end or 1.0, dt=args.dt or 0.01,
                     rtol=args.rtol, atol=args.atol, integrator=args.integrator, substeps=args.substeps,
                     init=_assignments(args.init, "--init"), params=_assignments(args.param, "--param"), fit=fit)


def cmd_sweep(args) -> int:
    import numpy as np

    from ..sweep import run_sweep

    task = task_from_args(args)
    members = _members(args)
    out = run_sweep(task, members, args.output, executor=args.executor, workers=args.workers, address=args.address,
                    plot=args.plot)
    cols, rows = out["columns"], out["rows"]
    print(f"  {out['ran']} members run in {out['seconds']:.2f} s, {out['skipped']} already finished; "
          f"summary -> {args.output}/summary.csv")
    shown = [c for c in cols if c not in ("member", "seed")][:6]
    if len(rows):
        print("  " + "  ".join(f"{c:>14.14}" for c in shown))
        for row in rows[:5]:
            print("  " + "  ".join(f"{row[cols.index(c)]:>14.6g}" for c in shown))
        if len(rows) > 5:
            print(f"  ... {len(rows) - 5} more rows")
    if np.isnan(rows).any():
        print("  note: empty cells (nan) where a member has no such result")
    return EXIT_OK
