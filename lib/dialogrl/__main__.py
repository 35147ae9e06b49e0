"""Command line: `python -m dialogrl demo | reproduce | compare | figures | claims | data | build-tiny | estimate`."""
from __future__ import annotations

import argparse
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dialogrl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    dem = sub.add_parser("demo", help="a first run of a few minutes: RL that moves a metric, with its figures")
    dem.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                     help="a parameter of notebooks/demo/first_run.ipynb (a Python literal), e.g. -p steps 60")
    dem.add_argument("--results", default="results", help="results root (default: results)")
    dem.add_argument("--no-progress", action="store_true", help="no progress bars")

    rep = sub.add_parser("reproduce", help="run every notebook with papermill and write results/REPORT.md")
    rep.add_argument("--only", nargs="+", metavar="STEM", help="run only these notebooks (file stems)")
    rep.add_argument("--profile", default="cpu", choices=["smoke", "cpu", "gpu", "colab", "confirm"],
                     help="parameter profile: cpu = the notebooks' defaults (default); "
                          "smoke, gpu, colab, confirm = params/<stem>/*.yaml")
    rep.add_argument("--notebooks", default="notebooks", help="folder of notebooks (default: notebooks)")
    rep.add_argument("--params", default="params", help="folder of profile files (default: params)")
    rep.add_argument("--papers", default="papers", help="folder of paper notes (default: papers)")
    rep.add_argument("--results", default="results", help="results root (default: results)")
    rep.add_argument("--no-progress", action="store_true", help="no progress bars")
    rep.add_argument("--resume", action="store_true",
                     help="finish each notebook's newest interrupted run of the profile (its finished training runs "
                          "are reused) instead of starting a new one")

    dat = sub.add_parser("data", help="the public dialogue data sets: list what is here, fetch what is not")
    dat.add_argument("action", choices=["list", "fetch"])
    dat.add_argument("names", nargs="*", metavar="NAME", help="data sets to fetch (default: all)")
    dat.add_argument("--root", default=None, help="the data folder (default: $DIALOGRL_DATA, else <model cache>/data)")
    dat.add_argument("--source", default=None, help="a local folder standing in for the web (<source>/<host>/<path>)")

    cmp = sub.add_parser("compare", help="the claims of several runs side by side (markdown)")
    cmp.add_argument("runs", nargs="+", metavar="RUN",
                     help="run folders (results/<stem>/<run_id>) or claims excerpts (papers/claims/<stem>.json)")
    cmp.add_argument("--out", default="results/COMPARE.md", help="where the markdown goes (default: %(default)s)")

    fig = sub.add_parser("figures", help="copy a cpu run's key figures into papers/figures/<stem>/")
    fig.add_argument("stem", help="the notebook (file stem)")
    fig.add_argument("--run", default=None, help="the run folder (default: the latest cpu run of the notebook)")
    fig.add_argument("--papers", default="papers", help="folder of paper notes (default: papers)")
    fig.add_argument("--results", default="results", help="results root (default: results)")

    cl = sub.add_parser("claims", help="rewrite papers/<stem>.md's claims table (and the README's verdicts) from a run")
    cl.add_argument("stems", nargs="*", metavar="STEM", help="notebooks (file stems; default: every paper file)")
    cl.add_argument("--run", default=None, help="the run folder to cite (one stem); default: the excerpt it cites now")
    cl.add_argument("--latest", action="store_true", help="cite each notebook's latest cpu run under --results")
    cl.add_argument("--papers", default="papers", help="folder of paper notes (default: papers)")
    cl.add_argument("--results", default="results", help="results root (default: results)")
    cl.add_argument("--readme", default="README.md", help="the README with the verdicts table (default: README.md)")

    pre = sub.add_parser("preregister", help="the line that registers a profile's resolved parameters in "
                                             "papers/<stem>.md (papers/PROTOCOL.md: confirmatory runs)")
    pre.add_argument("stem", help="the notebook (file stem)")
    pre.add_argument("--profile", default="confirm", help="the profile to register (default: confirm)")
    pre.add_argument("--notebooks", default="notebooks", help="folder of notebooks (default: notebooks)")
    pre.add_argument("--params", default="params", help="folder of profile files (default: params)")

    tiny = sub.add_parser("build-tiny", help="build (or find in the cache) an embedded tiny model")
    tiny.add_argument("name", nargs="?", default="tiny-dond", help="embedded model name (default: tiny-dond)")
    tiny.add_argument("--out", default=None, help="save here instead of the cache")
    tiny.add_argument("--force", action="store_true", help="rebuild even if cached")
    tiny.add_argument("--seed", type=int, default=None, help="build seed (initialisation, data order; default 0)")
    tiny.add_argument("--data", default=None, help="corpus source for models built from real logs (a local copy)")
    tiny.add_argument("--list", action="store_true",
                      help="list the embedded models and the packaged pretrained ones, and exit")

    est = sub.add_parser("estimate", help="a profile's predicted peak GPU memory and time (dialogrl.estimate)")
    est.add_argument("stems", nargs="*", metavar="STEM", help="notebooks (file stems; default: every registered paper)")
    est.add_argument("--profile", default="gpu", choices=["gpu", "colab"], help="default: gpu")
    est.add_argument("--gpu-memory", type=float, default=None, help="GiB on the GPU (default: the profile's GPU's)")
    est.add_argument("--forward-ms", type=float, default=None, help="ms a batched decoding pass (default: the GPU's)")
    est.add_argument("--bandwidth", type=float, default=None, help="the GPU's GB/s (default: the profile's GPU's)")
    est.add_argument("--tflops", type=float, default=None, help="the update's sustained TFLOP/s (default: the GPU's)")
    est.add_argument("--minibatch-tokens", type=int, default=None, help="bound the update's chunks (tokens)")
    est.add_argument("--calibrate", default=None, metavar="REPORT",
                     help="bench/gpu_check.py's JSON report: its measured rates and GPU in place of the assumed")

    args = parser.parse_args(argv)
    # each command imports the modules it runs, here and in its helper: `--help` and a misspelt argument answer
    # in 0.1 s, without importing torch and the training stack (2 s and more)
    try:
        if args.command == "reproduce":
            from dialogrl.reproduce import reproduce

            return reproduce(only=args.only, profile=args.profile, notebooks_dir=args.notebooks,
                             params_dir=args.params, papers_dir=args.papers, results_root=args.results,
                             progress=not args.no_progress, resume=args.resume)
        if args.command == "demo":
            from dialogrl.params import parse_value
            from dialogrl.reproduce import demo

            return demo({k: parse_value(k, v) for k, v in args.parameter}, args.results,
                        progress=not args.no_progress)
        if args.command == "compare":
            from dialogrl.compare import compare

            print(compare(args.runs, args.out))
            print(f"written to {args.out}")
            return 0
        if args.command == "figures":
            return _figures(args)
        if args.command == "data":
            return _data(args)
        if args.command == "claims":
            return _claims(args)
        if args.command == "preregister":
            from dialogrl.reproduce import design_hash, find_notebooks
            from dialogrl.run import PREREGISTERED

            (nb,) = find_notebooks(args.notebooks, [args.stem])
            print(PREREGISTERED.format(design_hash(nb, args.profile, args.params)))
            return 0
        if args.command == "estimate":
            from dialogrl.estimate import DEVICES
            from dialogrl.reproduce import estimate_table
            from dialogrl.rl.methods import papers

            device = DEVICES[args.profile]
            if args.calibrate:
                from dialogrl.estimate import calibrated
                from dialogrl.run import read_json

                device = calibrated(device, read_json(args.calibrate), args.calibrate)
            device = replace(device, **{k: v for k, v in (
                ("memory_gib", args.gpu_memory), ("forward_ms", args.forward_ms), ("bandwidth", args.bandwidth),
                ("tflops", args.tflops)) if v is not None})
            if args.gpu_memory is not None:
                device = replace(device, name=f"a GPU of {args.gpu_memory:g} GiB")
            kwargs = {"minibatch_tokens": args.minibatch_tokens} if args.minibatch_tokens is not None else {}
            for stem in args.stems or papers():
                print(estimate_table(stem, args.profile, device, **kwargs), end="\n\n")
            return 0
        if args.command == "build-tiny":
            return _build_tiny(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def _data(args) -> int:
    from dialogrl.data import DATASETS, fetch, list_table

    if args.action == "fetch":
        unknown = [n for n in args.names if n not in DATASETS]
        if unknown:
            raise ValueError(f"no data set {unknown}; known: {', '.join(DATASETS)}")
        failed = 0
        for name in args.names or DATASETS:
            try:
                print(f"{name}: {fetch(name, args.root, args.source)}")
            except RuntimeError as err:
                print(f"error: {err}", file=sys.stderr)
                failed += 1
        if failed:
            return 1
    print(list_table(args.root))
    return 0


def _figures(args) -> int:
    from dialogrl.reproduce import latest_run, refresh_figures

    run = args.run or latest_run(args.stem, args.results, profile="cpu")
    if run is None:
        raise ValueError(f"no finished cpu run of {args.stem} under {args.results}/{args.stem}/")
    for path in refresh_figures(args.stem, run, args.papers):
        print(path)
    return 0


def _claims(args) -> int:
    from dialogrl.claims import refresh_claims, write_glance
    from dialogrl.reproduce import latest_run

    stems = args.stems or sorted(p.stem for p in (Path(args.papers) / "claims").glob("*.json"))
    if args.run and len(stems) != 1:
        raise ValueError("--run names one run folder: give exactly one stem with it")
    for stem in stems:
        run = args.run
        if args.latest:
            run = latest_run(stem, Path(args.results), profile="cpu")
            if run is None:
                raise ValueError(f"no finished cpu run of {stem} under {args.results}/{stem}/")
        print(refresh_claims(stem, run, args.papers))
    if not args.stems:   # the confirmatory runs' blocks too, from their stored excerpts (papers/claims/confirm/)
        for path in sorted((Path(args.papers) / "claims" / "confirm").glob("*.json")):
            print(refresh_claims(path.stem, None, args.papers, confirm=True))
    write_glance(args.readme, args.papers)
    return 0


def _build_tiny(args) -> int:
    from dialogrl.packaged import PACKAGED_MODELS, installed_version
    from dialogrl.tiny import TINY_MODELS, build_info, build_tiny_model

    if args.list:
        for name, recipe in sorted(TINY_MODELS.items()):
            print(f"{name}: {recipe.description}")
        for name, spec in sorted(PACKAGED_MODELS.items()):
            state = "installed" if installed_version(name) else f"not installed: {spec.install_command}"
            print(f"{name}: {spec.description} [{state}]")
        return 0
    t0 = time.time()
    overrides = {"source": args.data} if args.data else {}
    path = build_tiny_model(args.name, force=args.force, out_dir=args.out, build_seed=args.seed, **overrides)
    info = build_info(path)
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # ru_maxrss is KiB on Linux
    print(f"{args.name}: {info['n_parameters'] / 1e6:.2f}M parameters, vocab {info['vocab_size']}, "
          f"{info['n_conversations']} conversations, "
          f"warm-start loss {info['first_loss']:.3f} -> {info['last_loss']:.3f}")
    print(f"built in {info['build_seconds']:.0f} s "
          f"(this call {time.time() - t0:.0f} s, peak memory {peak_gib:.2f} GiB)")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
