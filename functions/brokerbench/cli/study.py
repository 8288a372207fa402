"""A published study beside our stored runs of it (`study`), what a fault suite's runs kept (`guarantees`), and
loading archived runs (`import`)."""

from __future__ import annotations

import json
from pathlib import Path

from .common import (EXIT_BROKEN_PROMISE, EXIT_ENVIRONMENT, EXIT_INVALID, EXIT_OK, add_store_options, console, errors,
                     event_store)


def _study_comparisons(args, store, names: list[str]) -> list[dict] | int:
    """Each named study beside its stored runs (archived with --archive), or the exit code to return."""
    from ..reports import study

    comparisons = []
    for name in names:
        definition = study.load_study(name)
        try:
            runs = study.find_runs(store, definition, args.run)
        except study.StudyError as exc:
            errors.print(f"{exc}", style="red", markup=False)
            return EXIT_INVALID
        missing = [r.name for r in definition.runs if r.name not in runs]
        if missing:
            errors.print(f"study {name}: no ended run of {', '.join(missing)} is stored; run "
                         f"`brokerbench run --suite {name}` (add --scale 0.1 for a short one) or name one with --run",
                         style="red", markup=False)
            return EXIT_INVALID
        comparisons.append(study.compare(definition, runs))
        if args.archive:
            for run in runs.values():
                study.archive_run(store, run.run_id, Path(args.archive))
    return comparisons


def cmd_study(args) -> int:
    """A published study beside our stored runs of it (reports/study.py); `all` writes every study."""
    from ..reports import study

    try:
        names = study.study_names() if args.name == "all" else [study.load_study(args.name).name]
    except study.StudyError as exc:
        errors.print(f"{exc}", style="red", markup=False)
        return EXIT_INVALID
    if args.run and args.name == "all":
        errors.print("[red]--run: name one study to pick its runs (all takes each study's newest runs)[/]")
        return EXIT_INVALID
    with event_store(args) as store:
        if store is None:
            return EXIT_ENVIRONMENT
        comparisons = _study_comparisons(args, store, names)
    if isinstance(comparisons, int):
        return comparisons
    if args.json:
        text = json.dumps(comparisons if args.name == "all" else comparisons[0], indent=2)
    else:
        text = study.document(comparisons) if args.name == "all" else study.markdown(comparisons[0])
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text if text.endswith("\n") else text + "\n")
        held = sum(c["ours"]["verdict"] == study.HOLDS for comp in comparisons for c in comp["conclusions"])
        checked = sum(c["ours"]["verdict"] in (study.HOLDS, study.FAILS) for comp in comparisons
                      for c in comp["conclusions"])
        console.print(f"{args.out}: {len(comparisons)} studies, {held} of {checked} checked conclusions hold here",
                      markup=False, highlight=False)
    else:
        print(text)
    return EXIT_OK


def cmd_guarantees(args) -> int:
    """What each broker and durability setting of a fault suite kept, from its stored runs (reports/guarantees.py).
    Exit 1 when a broker lost acknowledged messages where its documentation promises none."""
    from ..reports import guarantees, study
    from ..spec import SpecError

    try:
        definition = guarantees.load(args.suite)
    except SpecError as exc:
        errors.print(f"suite: {exc.problems[0].message}", style="red", markup=False)
        return EXIT_INVALID
    except study.StudyError as exc:
        errors.print(f"{exc}", style="red", markup=False)
        return EXIT_INVALID
    with event_store(args) as store:
        if store is None:
            return EXIT_ENVIRONMENT
        try:
            runs = study.find_runs(store, definition, args.run)
        except study.StudyError as exc:
            errors.print(f"{exc}", style="red", markup=False)
            return EXIT_INVALID
        if not runs:
            errors.print(f"suite {args.suite}: no ended run of it is stored; run `brokerbench run --suite "
                         f"{args.suite}` (add --scale 0.25 for a short one) or name runs with --run", style="red",
                         markup=False)
            return EXIT_INVALID
        comparison = guarantees.compare(definition, runs)
        if args.archive:
            for run in runs.values():
                study.archive_run(store, run.run_id, Path(args.archive))
    text = json.dumps(comparison, indent=2) if args.json else guarantees.markdown(comparison, args.out or "-")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text if text.endswith("\n") else text + "\n")
        console.print(f"{args.out}: {len(runs)} of {len(definition.runs)} runs", markup=False, highlight=False)
    else:
        print(text)
    missing = [r.name for r in definition.runs if r.name not in runs]
    if missing:
        errors.print(f"no ended run stored of {', '.join(missing)}", markup=False, highlight=False)
    broken = [row for run in comparison["runs"] for row in run["settings"] if row["verdict"] == "broken"]
    return EXIT_BROKEN_PROMISE if broken else EXIT_OK


def cmd_import(args) -> int:
    """Load archived runs (brokerbench study --archive) into the event store."""
    from ..reports import study

    with event_store(args) as store:
        if store is None:
            return EXIT_ENVIRONMENT
        for name in args.files:
            try:
                run_id, count = study.import_archive(store, Path(name))
            except (OSError, ValueError, KeyError) as exc:
                errors.print(f"file {name}: {exc}", style="red", markup=False)
                return EXIT_INVALID
            console.print(f"{run_id}: {count} events", markup=False, highlight=False)
    return EXIT_OK


def register(sub) -> None:
    """Adds the study and import commands to the top-level parser's subparsers."""
    study = sub.add_parser("study", help="a published study's tables and conclusions beside our stored runs of it",
                           description="Writes the comparison of a study (a suite with a published section: "
                                       "tallberg, helenius, myastovskiy, downard) from stored runs: its tables "
                                       "beside ours with the ratio, and which of its conclusions hold here. Without "
                                       "--run, each of the study's runs is its newest ended run. `all` writes "
                                       "every study (docs/STUDIES.md).")
    study.add_argument("name", help="study name, or all")
    study.add_argument("--run", action="append", metavar="RUN_ID", help="use this stored run (repeat for each run)")
    study.add_argument("--out", help="write to this file (default: print)")
    study.add_argument("--json", action="store_true", help="the comparison as JSON instead of Markdown")
    study.add_argument("--archive", metavar="DIR", help="also write the runs' events to DIR/<run_id>.jsonl.gz")
    add_store_options(study)
    study.set_defaults(func=cmd_study)

    kept = sub.add_parser("guarantees", help="what each broker kept when a node failed, from a fault suite's runs",
                          description="Writes what each broker and durability setting of a fault suite (default "
                                      "guarantees) kept, from its stored runs: acknowledged messages lost, what the "
                                      "broker's documentation promises at those settings, the verdict, duplicates, "
                                      "send errors and how long nothing was acknowledged. Without --run, each of the "
                                      "suite's runs is its newest ended run. Exit 1 when a broker lost acknowledged "
                                      "messages where it promises none.")
    kept.add_argument("suite", nargs="?", default="guarantees", help="suite name (default guarantees)")
    kept.add_argument("--run", action="append", metavar="RUN_ID", help="use this stored run (repeat for each run)")
    kept.add_argument("--out", help="write to this file (default: print)")
    kept.add_argument("--json", action="store_true", help="the comparison as JSON instead of Markdown")
    kept.add_argument("--archive", metavar="DIR", help="also write the runs' events to DIR/<run_id>.jsonl.gz")
    add_store_options(kept)
    kept.set_defaults(func=cmd_guarantees)

    load = sub.add_parser("import", help="load archived runs (study --archive) into the event store")
    load.add_argument("files", nargs="+", metavar="FILE")
    add_store_options(load)
    load.set_defaults(func=cmd_import)
