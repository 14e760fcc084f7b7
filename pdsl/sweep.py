"""Parameter sweeps and ensembles: many simulations (or fits) of one model, one output directory each.

A sweep is a :class:`SweepTask` (what to do with each member: simulate or fit, and how) and a list of
members (parameter values, a seed). :func:`run_sweep` runs the members that are not finished yet and
writes::

    DIR/sweep.json           the task and the members (a re-run with other settings is refused)
    DIR/runs/NNNN/           one directory per member: trajectory.csv (simulate) or the fit's outputs,
                             and member.json, written last: a member with member.json is finished
    DIR/summary.csv          one row per member: its parameters and results (final values, energy
                             drift; fitted values and losses)
    DIR/summary.png          each result against the first swept parameter (with --plot)

Executors: ``process`` (default) — with one worker the serial baseline, in this process, the model
lowered once; with N workers a local process pool, the model lowered once per worker; ``ray`` —
one Ray actor per worker (the model lowered once per actor), on this machine
(``ray.init(num_cpus=N)``) or on a cluster (``ray.init(address=...)``). Simulations return their
tables to the driver, which writes them, so the workers need no shared file system; fits write their
output directory themselves (a cluster needs ``DIR`` on a shared file system). Every member is
deterministic given its parameters and seed, so every executor gives the same summary.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .diagnostics import PdslError

__all__ = ["SweepTask", "Member", "grid_members", "random_members", "members_from_toml", "run_sweep",
           "EXECUTORS", "parse_grid", "parse_range"]

EXECUTORS = ("process", "ray")
SWEEP_FORMAT = 1


@dataclass(frozen=True)
class Member:
    params: dict[str, float]
    seed: int = 0

    def to_dict(self) -> dict:
        return {"params": dict(self.params), "seed": int(self.seed)}


@dataclass(frozen=True)
class SweepTask:
    model_path: str
    model_name: str | None = None
    consts: dict[str, int] = field(default_factory=dict)
    formulation: str = "hamiltonian"
    mode: str = "simulate"  # simulate | fit
    # simulate
    t_end: float = 1.0
    dt: float = 0.01
    rtol: float = 1e-8
    atol: float | None = None
    integrator: str | None = None
    substeps: int = 1
    init: dict[str, float] = field(default_factory=dict)
    params: dict[str, float] = field(default_factory=dict)  # fixed values for every member
    # fit: a FitConfig as a dict (its `param` and `seed` are set per member)
    fit: dict | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["model_path"] = str(Path(self.model_path).resolve())
        return d


# ---------------------------------------------------------------- members
def _number(text: str, origin: str) -> float:
    from .sim.simulate import parse_float

    return parse_float(text, origin)


def parse_range(text: str, origin: str) -> tuple[str, str]:
    from .options import parse_assignment

    return parse_assignment(text, origin)


def parse_grid(item: str) -> tuple[str, list[float]]:
    """``m1=0.5:2:16`` (16 values from 0.5 to 2, ends included) or ``m1=0.5,1,2`` (these values)."""
    name, spec = parse_range(item, "--grid")
    if ":" in spec:
        parts = spec.split(":")
        if len(parts) != 3:
            raise PdslError.at("BadOption", f"--grid {name}={spec}: expected START:STOP:COUNT or a list v1,v2,...")
        lo, hi = _number(parts[0], f"--grid {name}"), _number(parts[1], f"--grid {name}")
        try:
            n = int(parts[2])
        except ValueError:
            raise PdslError.at("BadOption", f"--grid {name}: COUNT `{parts[2]}` is not a whole number") from None
        if not 1 <= n <= 1_000_000:
            raise PdslError.at("BadOption", f"--grid {name}: COUNT must be between 1 and 1000000, got {n}")
        return name, [float(v) for v in np.linspace(lo, hi, n)]
    values = [_number(v, f"--grid {name}") for v in spec.split(",") if v.strip()]
    if not values:
        raise PdslError.at("BadOption", f"--grid {name}: no values")
    return name, values


def grid_members(grids: list[tuple[str, list[float]]], seed: int = 0) -> list[Member]:
    """The Cartesian product of the grids (the first varies slowest)."""
    names = [n for n, _ in grids]
    if len(set(names)) != len(names):
        raise PdslError.at("BadOption", "a parameter is swept twice", hint="one --grid per parameter")
    total = math.prod(len(v) for _, v in grids)
    if total > 1_000_000:
        raise PdslError.at("BadOption", f"the grid has {total} members; at most 1000000")
    return [Member(dict(zip(names, combo)), seed) for combo in itertools.product(*(v for _, v in grids))]


def random_members(ranges: list[tuple[str, float, float]], n: int, seed: int) -> list[Member]:
    """``n`` members with each parameter uniform in its range (numpy's default generator, ``seed``);
    member k gets the seed ``seed + k`` for what it draws itself (a fit's split and initialisation)."""
    if n < 1:
        raise PdslError.at("BadOption", f"--samples must be at least 1, got {n}")
    rng = np.random.default_rng(seed)
    draws = rng.uniform([lo for _, lo, _ in ranges], [hi for _, _, hi in ranges], size=(n, len(ranges)))
    return [Member({name: float(v) for (name, _, _), v in zip(ranges, row)}, seed + k) for k, row in enumerate(draws)]


def members_from_toml(path: str | Path, seed: int = 0) -> list[Member]:
    """``[[member]]`` tables of parameter values (``"K[1]" = 2.0``), each optionally with ``seed``."""
    import tomllib

    from .diagnostics import Span, register_source
    from .limits import read_text, toml_loads

    p = Path(path)
    at = Span.point(str(p), 1, 1)
    try:
        text = read_text(p, what="--members file")
    except FileNotFoundError:
        raise PdslError.at("FileNotFound", f"no such file: {p}", at) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PdslError.at("BadConfig", f"cannot read {p}: {exc}", at) from None
    register_source(str(p), text)
    try:
        data = toml_loads(text, str(p), "BadConfig")
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", 1) or 1
        raise PdslError.at("BadConfig", f"{p} is not valid TOML: {exc}", Span.point(str(p), line, 1)) from None
    rows = data.get("member")
    if not isinstance(rows, list) or not rows:
        raise PdslError.at("BadConfig", f"{p} has no [[member]] tables", at,
                           hint='e.g.\n[[member]]\nm1 = 1.0\n\n[[member]]\nm1 = 1.5\nseed = 3')
    out = []
    for k, row in enumerate(rows):
        params = {}
        member_seed = seed + k
        for key, value in row.items():
            if key == "seed":
                if not isinstance(value, int) or isinstance(value, bool):
                    raise PdslError.at("BadConfig", f"member {k + 1}: seed must be an integer", at)
                member_seed = value
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise PdslError.at("BadConfig", f"member {k + 1}: `{key}` must be a finite number", at)
            else:
                params[key] = float(value)
        out.append(Member(params, member_seed))
    return out


# ---------------------------------------------------------------- one member
class Worker:
    """Runs members of one task; lowers the model once (per process or Ray actor)."""

    def __init__(self, task: SweepTask, num=None):
        self.task = task
        self.num = num
        if task.mode == "simulate":
            from .sim.simulate import time_grid

            if self.num is None:
                self.num = _compile(task)

            self.grid = time_grid(task.t_end, task.dt)

    def run(self, index: int, member: Member, member_dir: str | None = None) -> dict:
        """Simulate: ``{"columns", "data", "results"}``. Fit: ``{"results"}`` (outputs in ``member_dir``)."""
        if self.task.mode == "simulate":
            return self._simulate(member)
        return self._fit(member, member_dir)

    def _simulate(self, member: Member) -> dict:
        from .sim.simulate import simulate

        t = self.task
        res = simulate(self.num, self.grid, x0=dict(t.init), params={**t.params, **member.params}, rtol=t.rtol,
                       atol=t.atol, integrator=t.integrator, substeps=t.substeps)
        names, data = res.columns()
        results = {f"final:{n}": float(data[-1, k]) for k, n in enumerate(names) if n != "t"}
        if res.energy is not None:
            results["energy_drift"] = float(np.max(np.abs(res.energy - res.energy[0])))
        if res.constraint_rms is not None:
            results["constraint_rms_max"] = float(np.max(res.constraint_rms))
        return {"columns": list(names), "data": data, "units": res.column_units(), "results": results}

    def _fit(self, member: Member, member_dir: str | None) -> dict:
        from .fit.config import FitConfig
        from .fit.run import run_fit

        t = self.task
        fit = dict(t.fit or {})
        cfg = FitConfig(**{**fit, "param": {**fit.get("param", {}), **t.params, **member.params}, "seed": member.seed})
        out = Path(member_dir) / "fit"
        resume = (out / "checkpoint.npz").exists()
        summary = run_fit(t.model_path, t.model_name, cfg, out, resume=resume, consts=dict(t.consts),
                          progress=False, log=lambda *_: None)
        results = {f"fit:{n}": float(summary["params"][n]) for n in summary["free"]}
        for key in ("train_loss", "val_loss"):
            if summary.get(key) is not None:
                results[key] = float(summary[key])
        results["epochs"] = float(summary["epochs"])
        results["converged"] = float(bool(summary["converged"]))
        return {"results": results}


# process-pool plumbing: one Worker per process
_worker: Worker | None = None


def _init_process(task: SweepTask) -> None:
    global _worker
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _worker = Worker(task)


def _run_in_process(job: tuple[int, Member, str]) -> tuple[int, dict]:
    index, member, member_dir = job
    assert _worker is not None
    return index, _worker.run(index, member, member_dir)


# ---------------------------------------------------------------- the sweep
def _compile(task: SweepTask):
    from .pipeline import CompileOptions, compile_model

    return compile_model(task.model_path, CompileOptions(model=task.model_name, consts=dict(task.consts),
                                                         formulation=task.formulation)).numeric


def _check_members(task: SweepTask, members: list[Member]):
    """The numeric system (lowered once, reused by the serial executor), after checking every member's names."""
    if not members:
        raise PdslError.at("BadOption", "the sweep has no members", hint="give --grid, --random with --samples, or --members")
    num = _compile(task)
    known = [q.name for q in num.system.params]
    for m in members:
        for name in [*m.params, *task.params]:
            if name not in known:
                raise PdslError.at("BadOption", f"{num.system.name} has no parameter `{name}`",
                                   hint="parameters: " + (", ".join(known) or "none"))
    return num


def _write_json(path: Path, data: dict, sort: bool = True) -> None:
    from .data.csvio import atomic_path

    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=sort) + "\n", encoding="utf-8")


def run_sweep(task: SweepTask, members: list[Member], out_dir: str | Path, *, executor: str = "process",
              workers: int = 1, address: str | None = None, plot: bool = False,
              log=print) -> dict:
    """Run the unfinished members of the sweep into ``out_dir``; returns ``{"columns", "rows", "ran",
    "skipped", "seconds"}`` (the summary table) and writes summary.csv (and summary.png)."""
    from .data.csvio import write_table

    if executor not in EXECUTORS:
        raise PdslError.at("BadOption", f"--executor {executor}: unknown", hint="one of: " + ", ".join(EXECUTORS))
    if workers < 1:
        raise PdslError.at("BadOption", f"--workers must be at least 1, got {workers}")
    if task.mode not in ("simulate", "fit"):
        raise PdslError.at("BadOption", f"--mode {task.mode}: unknown", hint="simulate or fit")
    num = _check_members(task, members)
    out = Path(out_dir).resolve()  # workers (Ray actors, fits) may run in another directory
    if out.exists() and not out.is_dir():
        raise PdslError.at("BadOption", f"-o {out}: exists and is not a directory")
    spec = {"format": SWEEP_FORMAT, "task": task.to_dict(), "members": [m.to_dict() for m in members]}
    spec_path = out / "sweep.json"
    if spec_path.exists():
        try:
            old = json.loads(spec_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            old = None
        if old != json.loads(json.dumps(spec)):
            raise PdslError.at("BadOption", f"-o {out} holds another sweep (other model, settings or members)",
                               hint="give a new output directory, or repeat the sweep's own settings to resume it")
    else:
        _write_json(spec_path, spec)
    runs = out / "runs"
    width = max(4, len(str(len(members) - 1)))
    dirs = [runs / f"{k:0{width}d}" for k in range(len(members))]
    results: dict[int, dict] = {}
    pending = []
    for k, d in enumerate(dirs):
        done = d / "member.json"
        if done.exists():
            try:
                results[k] = json.loads(done.read_text(encoding="utf-8"))["results"]
                continue
            except (OSError, ValueError, KeyError):
                pass  # damaged: run it again
        pending.append(k)
    log(f"sweep: {len(members)} members, {len(members) - len(pending)} finished before, {len(pending)} to run "
        f"({task.mode}, {executor} executor, {workers} worker{'s' if workers > 1 else ''}) -> {out}")
    t0 = time.perf_counter()

    def finish(k: int, outcome: dict) -> None:
        d = dirs[k]
        d.mkdir(parents=True, exist_ok=True)
        if "columns" in outcome:
            write_table(d / "trajectory.csv", outcome["columns"], outcome["data"], outcome.get("units"))
        _write_json(d / "member.json", {"member": members[k].to_dict(), "results": outcome["results"]}, sort=False)
        results[k] = outcome["results"]

    jobs = [(k, members[k], str(dirs[k])) for k in pending]
    if jobs:
        if executor == "ray":
            _run_ray(task, jobs, workers, address, finish)
        elif workers == 1:
            worker = Worker(task, num)
            for k, m, d in jobs:
                finish(k, worker.run(k, m, d))
        else:
            _run_pool(task, jobs, workers, finish)
    seconds = time.perf_counter() - t0
    columns, rows = _summary_table(members, results)
    write_table(out / "summary.csv", columns, rows)
    if plot:
        _plot(columns, rows, out / "summary.png")
    return {"columns": columns, "rows": rows, "ran": len(pending), "skipped": len(members) - len(pending),
            "seconds": seconds}


def _run_pool(task: SweepTask, jobs, workers: int, finish) -> None:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    ctx = mp.get_context("spawn")  # no fork of a process holding CasADi/threads
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx, initializer=_init_process,
                             initargs=(task,)) as pool:
        futures = [pool.submit(_run_in_process, job) for job in jobs]
        for fut in as_completed(futures):
            k, outcome = fut.result()
            finish(k, outcome)


def _run_ray(task: SweepTask, jobs, workers: int, address: str | None, finish) -> None:
    try:
        import ray
        from ray.util import ActorPool
    except ImportError:
        raise PdslError.at("MissingDependency", "--executor ray needs the Python package `ray`, which is not installed",
                           hint='pip install "pdsl[ray]"') from None
    started = False
    if not ray.is_initialized():
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        started = True
    try:
        actor = ray.remote(num_cpus=1)(Worker)
        pool = ActorPool([actor.remote(task) for _ in range(min(workers, len(jobs)))])
        for k, outcome in zip((j[0] for j in jobs), pool.map(lambda a, job: a.run.remote(*job), jobs)):
            finish(k, outcome)
    finally:
        if started:
            ray.shutdown()


def _summary_table(members: list[Member], results: dict[int, dict]) -> tuple[list[str], np.ndarray]:
    pnames = list(dict.fromkeys(n for m in members for n in m.params))
    rnames = list(dict.fromkeys(n for k in sorted(results) for n in results[k]))
    columns = ["member", "seed", *pnames, *rnames]
    rows = []
    for k, m in enumerate(members):
        r = results.get(k, {})
        rows.append([k, m.seed, *[m.params.get(n, math.nan) for n in pnames], *[r.get(n, math.nan) for n in rnames]])
    return columns, np.array(rows, dtype=float).reshape(len(rows), len(columns))


def _plot(columns: list[str], rows: np.ndarray, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .data.csvio import atomic_path

    params = [c for c in columns[2:] if ":" not in c and c not in ("energy_drift", "constraint_rms_max", "train_loss",
                                                                    "val_loss", "epochs", "converged")]
    results = [c for c in columns[2:] if c not in params][:8]
    if not params or not results:
        return
    x = rows[:, columns.index(params[0])]
    n = len(results)
    fig, axes = plt.subplots(n, 1, figsize=(7, 1.8 * n + 0.6), sharex=True, squeeze=False)
    order = np.argsort(x, kind="stable")
    for ax, name in zip(axes[:, 0], results):
        ax.plot(x[order], rows[order, columns.index(name)], ".-", lw=0.8, ms=3)
        ax.set_ylabel(name, fontsize=8)
    axes[-1, 0].set_xlabel(params[0])
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
