"""``report.md`` of a fit: settings, parameters, loss curves, a validation rollout."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import pdsl.fit.outputs as out  # the module, not the pdsl.fit facade
from .checkpoint import writing

__all__ = ["write_report"]


def _fmt(v) -> str:
    return "–" if v is None or v != v else f"{v:.6g}"


def _parameter_rows(run, summary) -> list[str]:
    specs = {q.name: q for q in run.model.params}
    rows = ["| parameter | start | fitted | std. error | bounds |", "|---|---|---|---|---|"]
    for i, name in enumerate(run.num.p_names[: run.layout.n_phys]):
        if name not in run.layout.free_names:
            continue
        q = specs.get(name)
        bounds = f"[{_fmt(q.lower) if q and q.lower is not None else '−∞'}, {_fmt(q.upper) if q and q.upper is not None else '∞'}]"
        rows.append(f"| `{name}` | {_fmt(float(run.p_start[i]))} | {_fmt(summary['params'][name])} | "
                    f"{'not determined' if name in summary['stderr'] and summary['stderr'][name] is None else _fmt(summary['stderr'].get(name))}"
                    f" | {bounds} |")
    return rows


def _validation_plot(run, theta, out_dir: Path, final_dir: Path) -> str:
    trajs = run.val.trajectories or run.train.trajectories
    which = "validation" if run.val.trajectories else "training (no validation data)"
    traj = trajs[0]
    how = "from its first sample"
    starts = getattr(run, "_starts", {}).get("val" if run.val.trajectories else "train")
    if run.cfg.start == "estimate" and starts is not None and len(starts):
        from dataclasses import replace

        S = traj.S.copy()
        S[0] = starts[0]  # the estimated start of the trajectory's first chunk (chunk 0 starts at its sample 0)
        traj = replace(traj, S=S)
        how = "from its estimated start state"
    predicted = run.loss.predict(run.layout.p_from_theta(theta), traj)
    title = f"{run.model.name}: {which} trajectory {traj.label}, rollout {how}"
    with writing(final_dir / "validation.png"):
        out.plot_validation(out_dir / "validation.png", traj.t, traj.Y, predicted, run.data.observed, title)
    return f"{which} trajectory {traj.label} ({len(traj) - 1} steps, t = {traj.t[0]:g} … {traj.t[-1]:g})"


def _identifiability_rows(summary) -> list[str]:
    """What the data determine (pdsl.fit.identify): sentences, then correlations."""
    ident = summary.get("identifiability")
    if not ident:
        return []
    rows = ["## What these data determine", ""]
    notes = summary.get("notes") or []
    rows += [f"- {n}" for n in notes] if notes else ["- every free parameter is determined (no near-null direction of "
                                                     "the Gauss–Newton information, no correlation beyond ±0.99)"]
    return rows + ["", "Standard errors: s²(JᵀJ)⁻¹ of the Gauss–Newton information (chunk starts profiled out when "
                   "they are estimated), mapped to the parameters by the delta method.", ""]


def _profile_rows(summary) -> list[str]:
    """--profile: the profile-likelihood intervals next to the linear ones (pdsl.fit.profile)."""
    profiles = summary.get("profiles") or {}
    if not profiles:
        return []
    rows = ["## Profile likelihood (68 %)", "", "| parameter | estimate | profile interval | linear ± interval | open |",
            "|---|---|---|---|---|"]
    for name, p in profiles.items():
        lin = p.get("linear")
        rows.append(f"| `{name}` | {_fmt(p['estimate'])} | [{_fmt(p['lower'])}, {_fmt(p['upper'])}] | "
                    + (f"[{_fmt(lin[0])}, {_fmt(lin[1])}]" if lin else "–") + f" | {', '.join(p['open']) or '–'} |")
    return rows + ["", "Each parameter held at steps of one standard error, the others and every start refitted; the "
                   "interval is where χ² rises by less than 1 (× s² when the noise is not stated). Open: not bounded "
                   "within 8 steps.", ""]


def _residual_rows(summary) -> list[str]:
    """The largest standardized residuals with their data file lines (outliers, or model error there)."""
    top = summary.get("largest_residuals") or []
    mf = summary.get("misfit") or {}
    if not top:
        return []
    unit = "σ (the stated noise)" if mf.get("noise_known") else "σ (estimated from the residuals)"
    rows = ["## Largest standardized residuals", "", f"In units of {unit}; beyond 5σ is a warning above.", "",
            "| data line | column | t | trajectory | residual / σ |", "|---|---|---|---|---|"]
    rows += [f"| {x['line']} | `{x['column']}` | {_fmt(x['t'])} | {x['trajectory']} | {x['z']:.3g} |" for x in top]
    return rows + [""]


def _regularizer_rows(run, result) -> list[str]:
    """Settings and final values of the equilibrium / sparsity terms (pdsl.fit.regularize)."""
    from .regularize import RegularizedLoss

    if not isinstance(run.loss, RegularizedLoss):
        return []
    reg = run.loss.reg
    v = reg.values(result.state.theta)
    rows = ["## Regularisers", "", *(f"- {line}" for line in reg.describe())]
    rows.append("- the training loss above is the regularised objective; the validation loss is the plain data loss")
    if reg.eq is not None:
        rows.append(f"- final ‖f(z*, u*)‖² = {_fmt(v['equilibrium'])}")
    if reg.sp is not None:
        rows.append(f"- final Σ mean|f| over the flows = {_fmt(v['sparsity'])}")
        rec = result.state.extra.get("regularizer", {})
        if rec.get("fit"):
            rows.append(f"- primal–dual: final fit term {_fmt(rec['fit'][-1])} (ε = {_fmt(reg.sp.epsilon)}), "
                        f"multiplier λ = {_fmt(result.state.extra.get('dual_lambda'))}")
    return rows + ["", "Per-epoch values are in `checkpoint.npz` (header: `extra.regularizer`).", ""]


def write_report(run, result, summary, out_dir: Path, final_dir: Path | None = None) -> None:
    """history.csv, loss.png, validation.png and report.md into ``out_dir`` (a staging directory whose
    files are moved to ``final_dir`` afterwards: errors name the files there)."""
    final_dir = out_dir if final_dir is None else final_dir
    h = summary["history"]
    with writing(final_dir / "history.csv"):
        out.write_history(out_dir / "history.csv", h)
    if getattr(run.cfg, "plots", True):
        with writing(final_dir / "loss.png"):
            out.plot_losses(out_dir / "loss.png", h, run.cfg.loss)
        shown = _validation_plot(run, result.state.theta, out_dir, final_dir)
    else:
        shown = None
    c = run.cfg
    secs = np.asarray(h["seconds"], dtype=float)
    lines = [
        f"# Fit report: {run.model.name}",
        "",
        f"- model: `{run.model_path}`",
        f"- data: `{run.data.path}`: {len(run.train.trajectories)} training and {len(run.val.trajectories)} validation "
        f"trajectories (split by trajectory, seed {c.seed}), dt = {run.data.dt:g}",
        f"- observed columns: {', '.join(f'`{n}`' for n in run.data.observed)}"
        + (f"; column map {', '.join(f'`{k}` → `{v}`' for k, v in c.map.items())}" if c.map else ""),
        "- chunk starts: " + ("estimated with the parameters (the first sample is compared too; validation chunks get "
                              "their starts fitted at the current parameters)" if c.start == "estimate" else
                              "the data samples (BENCHMARKS A5)")
        + (f"; unmeasured: {', '.join(f'`{n}`' for n in run.data.latent)}" if run.data.latent else "")
        + ("" if run.data.uniform else "; irregular sampling: each interval integrated over its own length"),
        (f"- loss: {c.loss} over whole trajectories (one estimated start each), reached through windows of "
         f"{', '.join(map(str, run.stages[:-1])) or '–'} steps; error bars from the whole-trajectory fit"
         if run.stages else f"- loss: {c.loss} over chunks of {c.chunk} steps (stride {c.stride})")
        + f", {c.integrator} with {c.substeps} step(s) per interval"
        + (f" ({run.substeps_note})" if run.substeps_note else ""),
        *([f"- misfit: χ²/dof = {summary['misfit']['ratio']:.4g} over {summary['misfit']['dof']} degrees of freedom"
           + (" (noise as stated)" if summary["misfit"]["noise_known"] else " (no --noise for every column: in data units)")]
          if summary.get("misfit") else []),
        f"- optimiser: {c.method}, {summary['epochs']} epochs" + (" (converged)" if summary["converged"] else "")
        + (f", lr {c.lr:g} ({c.schedule}{f', warm-up over {c.warmup} epochs' if c.warmup else ''}), weight decay {c.weight_decay:g}, batch {c.batch}" if c.method == "adamw" else ""),
        f"- time: {secs.sum():.1f} s in all, {secs.mean():.3g} s per epoch" if secs.size else "- time: –",
        f"- final loss: training {_fmt(summary['train_loss'])}, validation {_fmt(summary['val_loss'])}",
        "",
    ]
    lines += _regularizer_rows(run, result)
    if run.layout.free_names:
        lines += ["## Parameters", "", *_parameter_rows(run, summary), ""]
        lines += _identifiability_rows(summary)
        lines += _profile_rows(summary)
        lines += _residual_rows(summary)
    if not summary.get("identifiability") and summary.get("notes"):  # e.g. a network fit whose training stalled
        lines += ["## Notes", "", *[f"- {n}" for n in summary["notes"]], ""]
    if run.layout.networks:
        specs = {nn.name: nn for nn in run.num.system.neural}
        lines += ["## Networks", "", "| network | layers | activation | weights |", "|---|---|---|---|"]
        for net in run.layout.networks:
            nn = specs[net.name]
            lines.append(f"| `{net.name}` | {nn.n_in} → {' → '.join(map(str, nn.hidden))} → {nn.n_out} | {nn.act} | {net.size} |")
        lines += ["", "Weights: `networks.npz` (flat vectors and torch `Sequential` state-dict arrays).", ""]
    if shown is not None:
        lines += ["## Loss curves", "", "![loss curves](loss.png)", "", "## Predicted vs measured", "",
                  f"Rollout of the fitted model over the whole {shown}.", "", "![validation rollout](validation.png)", ""]
    else:
        lines += ["Plots were not drawn (`--no-plots`); the per-epoch losses are in `history.csv`.", ""]
    with writing(final_dir / "report.md"):
        out.write_text(out_dir / "report.md", "\n".join(lines) + "\n")
