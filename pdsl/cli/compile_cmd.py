"""``pdsl compile``: write a model's numerical code (CasADi files, C, numpy, an FMU)."""

from __future__ import annotations

import sys

from .common import EXIT_OK, compile_options, write_guarded


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
    write_guarded(lambda: files.extend(compile_to(num, args.target, args.output, experiment=experiment, progress=progress)),
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

