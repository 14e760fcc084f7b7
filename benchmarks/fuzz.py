"""Long mutation-fuzzing campaign of the front end and lowering (not run in CI).

The CI test ``tests/resolve/test_properties.py::test_mutated_models_fail_only_with_located_pdsl_errors``
runs a fixed, derandomized set of a few hundred mutants. This script runs the *same* mutation
strategy (the ``mutants`` strategy and ``compile_front_end`` of that module: one place for the
mutations) with fresh randomness for as long as you like, in worker processes with a memory
cap, and counts what happened to every mutant:

* ``ok`` — the mutant is still a valid model and lowers;
* ``located`` — a :class:`~pdsl.diagnostics.PdslError` whose diagnostics render and point inside the text;
* ``internal`` — any other exception, or a diagnostic that does not point inside the text (a bug);
* ``hang`` — still running after ``--hang`` seconds (a bug);
* ``memory`` — a ``MemoryError`` under the ``--memory`` cap, or a worker killed (a bug).

Each bug is written to ``benchmarks/fuzz_findings/`` (the model text and the exception) so that it
can be turned into a regression ``@example``.

Run: ``python benchmarks/fuzz.py --minutes 30 --workers 2`` (writes benchmarks/results_fuzz.md).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import resource
import signal
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FINDINGS = ROOT / "benchmarks" / "fuzz_findings"
OUTCOMES = ("ok", "located", "internal", "hang", "memory")


class _TimeUp(Exception):
    pass


class _Hang(Exception):
    pass


def front_end_outcome(T, text: str, formulation: str) -> tuple[str, str, set]:
    """(outcome, detail, diagnostic codes) of one mutant through the front end (the CI property's stage):
    "ok", "located" (every diagnostic inside the text), or "internal" for a diagnostic placed outside it.
    Exceptions other than PdslError propagate (the callers classify hangs, memory and crashes)."""
    from pdsl.diagnostics import PdslError

    try:
        T.compile_front_end(text, formulation)
        return "ok", "", set()
    except PdslError as err:
        try:
            T._check_diagnostics(err, text)
            return "located", "", {d.code for d in err.diagnostics}
        except AssertionError:
            return "internal", "diagnostic outside the text:\n" + "".join(traceback.format_exc()), set()


def _worker(seed: int, seconds: float, hang: int, memory_gb: float, queue) -> None:
    """Run mutants until ``seconds`` have passed; put the outcome counts on ``queue``."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "resolve")]
    limit = int(memory_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st

    import test_properties as T

    counts = dict.fromkeys(OUTCOMES, 0)
    findings: list[dict] = []
    end = time.monotonic() + seconds

    def alarm(signum, frame):
        raise _Hang(f"still running after {hang} s")

    signal.signal(signal.SIGALRM, alarm)

    @hypothesis_seed(seed)
    @settings(max_examples=10**9, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(text=T.mutants(), formulation=st.sampled_from(["hamiltonian", "lagrangian"]))
    def campaign(text, formulation):
        if time.monotonic() > end:
            raise _TimeUp
        signal.alarm(hang)
        try:
            outcome, detail, _ = front_end_outcome(T, text, formulation)
        except _Hang as exc:
            outcome, detail = "hang", str(exc)
        except MemoryError:
            outcome, detail = "memory", "MemoryError"
        except _TimeUp:
            raise
        except Exception:  # noqa: BLE001 - what the campaign looks for
            outcome, detail = "internal", traceback.format_exc()
        finally:
            signal.alarm(0)
        counts[outcome] += 1
        if outcome not in ("ok", "located"):
            findings.append({"outcome": outcome, "formulation": formulation, "text": text, "detail": detail[-4000:]})

    try:
        campaign()
    except _TimeUp:
        pass
    queue.put({"counts": counts, "findings": findings})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--hang", type=int, default=30, help="seconds after which a mutant counts as a hang")
    ap.add_argument("--memory", type=float, default=4.0, help="address-space cap per worker, GiB")
    ap.add_argument("-o", "--output", default=str(ROOT / "benchmarks" / "results_fuzz.md"))
    args = ap.parse_args()

    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    started = time.time()
    procs = [ctx.Process(target=_worker, args=(args.seed + k, args.minutes * 60, args.hang, args.memory, queue))
             for k in range(args.workers)]
    for p in procs:
        p.start()
    results = []
    for _ in procs:
        try:
            results.append(queue.get(timeout=args.minutes * 60 + 4 * args.hang + 120))
        except Exception:  # noqa: BLE001 - a worker died (killed for memory, segfault)
            results.append({"counts": dict.fromkeys(OUTCOMES, 0) | {"memory": 1}, "findings": []})
    for p in procs:
        p.join(timeout=10)
        if p.exitcode not in (0, None):
            results.append({"counts": dict.fromkeys(OUTCOMES, 0) | {"memory": 1},
                            "findings": [{"outcome": "memory", "text": "", "detail": f"worker exit code {p.exitcode}"}]})
    counts = {k: sum(r["counts"][k] for r in results) for k in OUTCOMES}
    findings = [f for r in results for f in r["findings"]]
    elapsed = time.time() - started
    if findings:
        FINDINGS.mkdir(exist_ok=True)
        for k, f in enumerate(findings):
            (FINDINGS / f"{args.seed}_{k}.json").write_text(json.dumps(f, indent=1), encoding="utf-8")
    total = sum(counts.values())
    rows = "\n".join(f"| {k} | {counts[k]} |" for k in OUTCOMES)
    text = f"""# Front-end fuzzing campaign (`benchmarks/fuzz.py`)

Mutants of the LANGUAGE.md §8 models, the fuzz seeds and the bundled models (characters, tokens,
lines, names, words, inserted statements, extreme numbers), each parsed, resolved and lowered in
both formulations. Run: `python benchmarks/fuzz.py --minutes {args.minutes:g} --workers {args.workers} --seed {args.seed}`
on {platform.machine()}, Python {platform.python_version()}; {elapsed / 60:.1f} min wall, hang limit
{args.hang} s, memory cap {args.memory:g} GiB per worker.

| outcome | mutants |
|---|---|
{rows}
| **total** | {total} ({total / max(elapsed, 1e-9):.1f} per second) |

`internal`, `hang` and `memory` are bugs; each is saved under `benchmarks/fuzz_findings/`.
"""
    tmp = Path(args.output).with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, args.output)
    print(text)
    sys.exit(1 if counts["internal"] + counts["hang"] + counts["memory"] else 0)


if __name__ == "__main__":
    main()
