"""A timed mutation-fuzzing campaign, in this process, with reproducers (not run in CI).

The CI test ``tests/resolve/test_properties.py::test_mutated_models_fail_only_with_located_pdsl_errors`` runs a
fixed, derandomized set of 300 mutants. This script draws mutants from the *same* strategy (``mutants`` of that
module: every seed — LANGUAGE.md §8, the extra seeds, the bundled models, the composition assemblies and the
``std:`` component library) with fresh randomness for ``--minutes``, in this process (no pickling, no worker
start-up), and counts what happened to each:

* ``ok`` — still a valid model;
* ``located`` — a PdslError whose diagnostics render and point inside the text; counted by diagnostic code;
* ``internal`` — any other exception (exit 1 with ``--stage check``/``simulate``), or a diagnostic outside the text;
* ``hang`` — still running after ``--hang`` seconds (SIGALRM);
* ``memory`` — a MemoryError under the ``--memory`` cap (RLIMIT_AS of this process).

``--stage lower`` (default): what the CI property checks — parse, resolve and lower every model of the text in
the Hamiltonian or the Lagrangian formulation. ``--stage check``: ``pdsl --debug check FILE`` in this process
(exit 1 = internal). ``--stage simulate``: ``pdsl --debug simulate FILE --t-end 0.05 --integrator ...`` (the
numerics too; ~10× slower per mutant).

Each internal/hang/memory finding is written to ``--findings`` (default ``benchmarks/fuzz_findings/``):
``<seed>_<n>.phm`` (the mutant, a file to run as is) and ``<seed>_<n>.txt`` (stage, formulation, the command that
reproduces it, the traceback). At most ``--keep`` files per distinct signature (exception type and the innermost
pdsl frame); the report counts them all.

Run: ``python benchmarks/fuzz_campaign.py --minutes 30`` (``--seed N`` repeats a campaign's mutants, given the
same seeds and library versions). Exit status 1 when anything but ok/located was found.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import os
import platform
import re
import resource
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "resolve")]
os.environ.setdefault("PDSL_NO_CACHE", "1")  # no compiled-model cache entry per mutant

OUTCOMES = ("ok", "located", "internal", "hang", "memory")


class _TimeUp(Exception):
    pass


class _Hang(BaseException):  # not an Exception: main() and pdsl must not swallow it
    pass


def _signature(tb_text: str) -> str:
    """The exception type and the innermost frame inside pdsl: one bug, however many mutants show it."""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', tb_text)
    ours = [f for f in frames if "/pdsl/" in f[0]]
    where = ours[-1] if ours else (frames[-1] if frames else ("?", "?", "?"))
    last = next((ln for ln in reversed(tb_text.strip().splitlines()) if ln.strip()), "?")
    kind = last.split(":", 1)[0].strip()
    return f"{kind} at {Path(where[0]).name}:{where[1]} ({where[2]})"


def _forget_models() -> None:
    """Drop what pdsl keeps between commands of one process for the same model (integrators, mapped functions):
    every mutant is a new model, and a kept integrator of a large one (a Cartesian gear's: a 7.5M-instruction
    Jacobian, ~700 MB) would pile up to the memory cap over a campaign and be counted against an innocent mutant."""
    from pdsl.sim import simulate as S

    S._INTEGRATORS.clear()
    S._MAPS.clear()


class Campaign:
    def __init__(self, args) -> None:
        self.args = args
        self.counts = dict.fromkeys(OUTCOMES, 0)
        self.codes: collections.Counter = collections.Counter()
        self.signatures: collections.Counter = collections.Counter()
        self.examples: dict[str, str] = {}  # signature -> first reproducer file
        self.saved = 0
        self.findings = Path(args.findings)
        self.work = Path(tempfile.mkdtemp(prefix="pdsl-fuzz-"))

    # ------------------------------------------------------------------ one mutant
    def run_one(self, text: str, formulation: str) -> None:
        import test_properties as T

        detail = ""
        signal.alarm(self.args.hang)
        try:
            if self.args.stage == "lower":
                from fuzz import front_end_outcome  # benchmarks/fuzz.py: the same classification as the pooled run

                outcome, detail, codes = front_end_outcome(T, text, formulation)
                self.codes.update(codes)
            else:
                outcome, detail = self._cli(text, formulation)
        except _Hang as exc:
            outcome, detail = "hang", str(exc)
        except MemoryError:
            outcome, detail = "memory", "MemoryError"
        except _TimeUp:
            raise
        except RecursionError:
            outcome, detail = "internal", traceback.format_exc()
        except Exception:  # noqa: BLE001 - what the campaign looks for
            outcome, detail = "internal", traceback.format_exc()
        finally:
            signal.alarm(0)
        self.counts[outcome] += 1
        if outcome not in ("ok", "located"):
            self._save(outcome, text, formulation, detail)

    def _command(self, path: str, formulation: str) -> list[str]:
        if self.args.stage == "check":
            return ["--debug", "check", path]
        return ["--debug", "simulate", path, "--t-end", "0.05", "--formulation", formulation, "--compile", "no",
                "-o", str(self.work / "out.csv")]

    def _cli(self, text: str, formulation: str) -> tuple[str, str]:
        from pdsl.cli.main import main

        path = self.work / "fuzz.phm"
        path.write_text(text, encoding="utf-8")
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(self._command(str(path), formulation))
        said = err.getvalue()
        _forget_models()
        if code == 0:
            return "ok", ""
        if code == 2:
            self.codes.update(set(re.findall(r"\berror\[(\w+)\]", said)) or {"?"})
            return "located", ""
        return "internal", f"exit {code}\n{said[-6000:]}"

    def _save(self, outcome: str, text: str, formulation: str, detail: str) -> None:
        sig = outcome if outcome in ("hang", "memory") else _signature(detail)
        self.signatures[sig] += 1
        if self.signatures[sig] > self.args.keep:
            return
        self.findings.mkdir(parents=True, exist_ok=True)
        stem = self.findings / f"{self.args.seed}_{self.saved}"
        self.saved += 1
        stem.with_suffix(".phm").write_text(text, encoding="utf-8")
        if self.args.stage == "lower":
            how = (f"python -c \"import sys; sys.path[:0] = ['.', 'tests/resolve']; import test_properties as T; "
                   f"T.compile_front_end(open('{stem.with_suffix('.phm')}').read(), '{formulation}')\"")
        else:
            cmd = self._command(str(stem.with_suffix(".phm")), formulation)
            how = "pdsl " + " ".join(c if c != str(self.work / "out.csv") else "/tmp/out.csv" for c in cmd)
        stem.with_suffix(".txt").write_text(
            f"outcome: {outcome}\nstage: {self.args.stage}\nformulation: {formulation}\nsignature: {sig}\n"
            f"reproduce (from the repository root): {how}\n\n{detail[-8000:]}\n", encoding="utf-8")
        self.examples.setdefault(sig, str(stem.with_suffix(".phm").relative_to(ROOT))
                                 if stem.is_relative_to(ROOT) else str(stem.with_suffix(".phm")))

    # ------------------------------------------------------------------ the loop
    def run(self) -> float:
        from hypothesis import HealthCheck, Phase, given, settings
        from hypothesis import seed as hypothesis_seed
        from hypothesis import strategies as st

        import test_properties as T

        end = time.monotonic() + self.args.minutes * 60

        def alarm(signum, frame):
            raise _Hang(f"still running after {self.args.hang} s")

        signal.signal(signal.SIGALRM, alarm)

        @hypothesis_seed(self.args.seed)
        @settings(max_examples=10**9, deadline=None, database=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(text=T.mutants(), formulation=st.sampled_from(["hamiltonian", "lagrangian"]))
        def campaign(text, formulation):
            if time.monotonic() > end:
                raise _TimeUp
            self.run_one(text, formulation)
            if self.args.progress and sum(self.counts.values()) % self.args.progress == 0:
                print(f"  {sum(self.counts.values())} mutants: {self.counts}", file=sys.stderr, flush=True)

        started = time.monotonic()
        with contextlib.suppress(_TimeUp):
            campaign()
        return time.monotonic() - started

    def report(self, elapsed: float) -> str:
        import test_properties as T

        total = sum(self.counts.values())
        rows = "\n".join(f"| {k} | {self.counts[k]} |" for k in OUTCOMES)
        codes = "\n".join(f"| {c} | {n} |" for c, n in self.codes.most_common())
        sigs = "\n".join(f"| {n} | `{s}` | {self.examples.get(s, '')} |" for s, n in self.signatures.most_common()) \
            or "| 0 | none | |"
        return f"""# Fuzzing campaign (`benchmarks/fuzz_campaign.py`)

`python benchmarks/fuzz_campaign.py --minutes {self.args.minutes:g} --stage {self.args.stage} --seed {self.args.seed}`
on {platform.machine()}, Python {platform.python_version()}; {elapsed / 60:.1f} min, in one process, {len(T.SEEDS)} seeds
({len(T.COMPOSED)} composition assemblies, {len(T.STD_SEEDS)} from the std: library), hang limit {self.args.hang} s,
memory cap {self.args.memory:g} GiB.

| outcome | mutants |
|---|---|
{rows}
| **tried** | {total} ({total / max(elapsed, 1e-9):.1f} per second) |

Located errors by diagnostic code (a mutant with several codes counts under each):

| code | mutants |
|---|---|
{codes}

Internal errors, hangs and memory exhaustion by signature (reproducers in `{self.args.findings}`):

| mutants | signature | first reproducer |
|---|---|---|
{sigs}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--stage", choices=("lower", "check", "simulate"), default="lower")
    ap.add_argument("--hang", type=int, default=30, help="seconds after which a mutant counts as a hang")
    ap.add_argument("--memory", type=float, default=4.0, help="address-space cap of this process, GiB (0: none)")
    ap.add_argument("--findings", default=str(ROOT / "benchmarks" / "fuzz_findings"))
    ap.add_argument("--keep", type=int, default=3, help="reproducers kept per distinct signature")
    ap.add_argument("--progress", type=int, default=0, help="print the counts every N mutants")
    ap.add_argument("-o", "--output", help="also write the report (markdown) here")
    args = ap.parse_args()
    if args.memory > 0:
        limit = int(args.memory * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    campaign = Campaign(args)
    elapsed = campaign.run()
    text = campaign.report(elapsed)
    if args.output:
        tmp = Path(args.output).with_suffix(".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, args.output)
    print(text)
    bad = campaign.counts["internal"] + campaign.counts["hang"] + campaign.counts["memory"]
    sys.stdout.flush()
    os._exit(1 if bad else 0)  # no interpreter teardown (sympy, CasADi): the report is out


if __name__ == "__main__":
    main()
