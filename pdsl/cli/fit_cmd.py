"""`pdsl fit` and `pdsl evaluate`: argument parsers and command bodies (heavy imports inside)."""

from __future__ import annotations

from ..diagnostics import PdslError


def add_parsers(sub, common) -> None:
    p = sub.add_parser("fit", help="fit free parameters and neural components to trajectory CSVs")
    common(p)
    p.add_argument("--data", help="trajectory CSV (the format `simulate` writes; several trajectories via a traj column)")
    p.add_argument("--free", help="comma-separated parameters to fit (in addition to those marked {free})")
    p.add_argument("--config", help="experiment file (TOML)")
    p.add_argument("-o", "--output", help="output directory")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in the output directory")

    p = sub.add_parser("evaluate", help="rollout metrics of a model on test trajectories")
    common(p)
    p.add_argument("--data", required=True, help="test trajectory CSV")
    p.add_argument("--params", help="fitted parameters (JSON written by `pdsl fit`)")


def cmd_fit(args) -> int:
    raise PdslError.at("NotYetSupported", "`pdsl fit` is not implemented yet")


def cmd_evaluate(args) -> int:
    raise PdslError.at("NotYetSupported", "`pdsl evaluate` is not implemented yet")
