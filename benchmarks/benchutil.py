"""Helpers every benchmark and reproduction script shares: progress lines, the load, markdown tables, git."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def log(msg: str = "") -> None:
    print(msg, flush=True)


def loadavg() -> str:
    """The 1/5/15-minute load averages ("n/a" where the platform has none)."""
    try:
        return " / ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def table(header, rows) -> str:
    """A markdown table."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def git(*args: str) -> str:
    """``git ARGS`` in the repository ("" when git or the repository is missing)."""
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
