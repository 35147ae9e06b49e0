"""A learning pilot: run a notebook over a small grid of training knobs and read only its manipulation checks.

    python bench/pilot.py 04_ibrl_bilateral --set tasks='[telesales]' n_seeds=1 \\
        --grid steps=10,30 lr=1e-3,3e-3 [--out results/pilots/04] [--params params/04_ibrl_bilateral/smoke.yaml]

Each grid point (the product of the --grid lists, over the --set values, over the notebook's cpu defaults or a
--params file) is one papermill run of the notebook into its own folder under --out. Of its summary.json the pilot
reads only `manipulation`: each trained method's gain over the base on its own training objective against its own
training counterpart, the gain's interval, the threshold (a share of the room the base leaves) and whether it passed
(dialogrl.claims.manipulation_check), plus the run's wall time. Held-out numbers and method differences are not read:
a pilot chooses how long and how hard to train before any method is compared (papers/PROTOCOL.md, "A design fixed
before any comparison").

Writes `pilot.csv` and `pilot.md` (one row per grid point and trained method) to --out, and prints the table.
Values are YAML (`lr=1e-3`, `tasks='[telesales]'`, `ablation=false`). Runs one after another: a pilot's points are
compared on time too, so never run two at once on a small machine.
"""
from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import yaml


def value(text: str):
    """A YAML value, with numbers such as 1e-3 (a string to YAML 1.1) read as numbers."""
    v = yaml.safe_load(text)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


def parse_pairs(items: list[str], lists: bool) -> dict:
    """k=v (a YAML value) or, with `lists`, k=v1,v2,... (each a YAML value) into a dict."""
    out = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"expected name=value, got {item!r}")
        key, text = item.split("=", 1)
        out[key] = [value(v) for v in text.split(",")] if lists else value(text)
    return out


def checks(manipulation: dict, path: tuple = ()) -> list[tuple[str, dict]]:
    """The manipulation records in a summary's `manipulation` (nested by task and/or method), with their paths."""
    if "passed" in manipulation and "gain" in manipulation:
        return [(".".join(path), manipulation)]
    return [c for k, v in manipulation.items() if isinstance(v, dict) for c in checks(v, path + (str(k),))]


def markdown(table) -> str:
    """A DataFrame as a Markdown table, floats to 3 decimals."""
    cell = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    return "\n".join(lines + ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stem", help="the notebook, e.g. 04_ibrl_bilateral")
    p.add_argument("--set", nargs="*", default=[], help="fixed parameters, name=value")
    p.add_argument("--grid", nargs="*", default=[], help="grid parameters, name=v1,v2,...")
    p.add_argument("--params", default=None, help="a parameters YAML under the --set values (default: cpu defaults)")
    p.add_argument("--out", default=None, help="default results/pilots/<stem>-<time>")
    args = p.parse_args()

    import pandas as pd
    import papermill as pm

    repo = Path(__file__).resolve().parents[1]
    notebook = repo / "notebooks" / f"{args.stem}.ipynb"
    if not notebook.exists():
        raise SystemExit(f"no notebook {notebook}")
    fixed = yaml.safe_load(Path(args.params).read_text()) if args.params else {}
    fixed.update(parse_pairs(args.set, lists=False))
    grid = parse_pairs(args.grid, lists=True)
    out = Path(args.out or repo / "results" / "pilots" / f"{args.stem}-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    points = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    folders = [out / ("-".join(f"{k}{v}" for k, v in point.items()) or "default") for point in points]
    taken = [str(f) for f in folders if f.exists()]
    if taken:  # refused before the first point runs, not hours later: runs never overwrite each other
        raise SystemExit(f"run folders already exist: {', '.join(taken)} (give a new --out)")
    rows = []
    for point, run_dir in zip(points, folders):
        run_dir.mkdir()
        t0 = time.time()
        pm.execute_notebook(str(notebook), str(run_dir / "notebook.ipynb"), cwd=str(repo), progress_bar=False,
                            parameters={**fixed, **point, "run_dir": str(run_dir)})
        minutes = (time.time() - t0) / 60
        found = checks(json.loads((run_dir / "summary.json").read_text()).get("manipulation", {}))
        for method, c in found:
            rows.append({**point, "method": method, "base": c.get("base"), "gain": c["gain"],
                         "lo": (c.get("ci") or [None, None])[0], "hi": (c.get("ci") or [None, None])[1],
                         "threshold": c.get("threshold"), "passed": c["passed"], "seeds": c.get("seeds"),
                         "minutes": round(minutes, 1)})
        table = pd.DataFrame(rows)
        table.to_csv(out / "pilot.csv", index=False)
        (out / "pilot.md").write_text(
            f"Pilot of {args.stem}: fixed {json.dumps(fixed)}; grid {json.dumps(grid)}\n\n"
            + markdown(table) + "\n")
        print(table.tail(len(found)).to_string(index=False), flush=True)
    print(f"\n{out / 'pilot.md'}")


if __name__ == "__main__":
    main()
