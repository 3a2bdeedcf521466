"""Generate WfCommons workflow instances offline, reproducibly.

Uses the WfChef recipes of the ``wfcommons`` package (a bench dependency:
``pip install -e .[bench]``); each instance is built with fixed seeds for
Python's and NumPy's generators and for the UUIDs the recipes give files and
duplicated nodes, then canonicalised (files renamed ``f000001.ext`` in order
of appearance, fixed timestamps and author) so that a rerun writes the same
bytes. Without arguments it regenerates the committed test data,
tests/data/wfcommons/ (one small instance per recipe):

    python benchmarks/gen_wfcommons.py
    python benchmarks/gen_wfcommons.py --out /tmp/wf --sizes 100 200 500
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import uuid
from pathlib import Path

#: recipe label -> WfChef recipe class name
RECIPES = {
    "montage": "MontageRecipe",
    "epigenomics": "EpigenomicsRecipe",
    "cycles": "CyclesRecipe",
    "1000genome": "GenomeRecipe",
    "blast": "BlastRecipe",
    "seismology": "SeismologyRecipe",
    "soykb": "SoykbRecipe",
    "srasearch": "SrasearchRecipe",
}

#: the committed test instances: the smallest size of each recipe at or above 50 tasks
TEST_SIZE = 50
FIXED_TIME = "2024-01-01T00:00:00+00:00"


def _seed_everything(seed: int) -> None:
    import numpy as np
    import wfcommons.wfchef.duplicate as dup

    random.seed(seed)
    np.random.seed(seed)
    rng = random.Random(seed + 1)

    def uuid4() -> uuid.UUID:
        return uuid.UUID(int=rng.getrandbits(128), version=4)

    uuid.uuid4 = uuid4  # abstract_recipe calls uuid.uuid4()
    dup.uuid4 = uuid4  # duplicate imported the function


def canonical(doc: dict) -> dict:
    """``doc`` with files renamed in order of appearance and fixed metadata."""
    spec = doc["workflow"]["specification"]
    rename: dict[str, str] = {}
    for f in spec["files"]:
        old = f["id"]
        ext = old[old.index("."):] if "." in old else ""
        rename[old] = f"f{len(rename) + 1:06d}{ext}"
        f["id"] = rename[old]
    for t in spec["tasks"]:
        t["inputFiles"] = [rename[x] for x in t["inputFiles"]]
        t["outputFiles"] = [rename[x] for x in t["outputFiles"]]
    doc["createdAt"] = FIXED_TIME
    doc["workflow"]["execution"]["executedAt"] = FIXED_TIME
    doc["author"] = {"name": "wfcommons", "email": "support@wfcommons.org"}
    return doc


def generate(label: str, tasks: int, seed: int) -> dict:
    """One instance of recipe ``label`` with at most ``tasks`` tasks (WfChef's bound), or
    the recipe's smallest base graph when that is larger."""
    import wfcommons.wfchef.recipes as recipes
    from wfcommons import WorkflowGenerator

    recipe_cls = getattr(recipes, RECIPES[label])
    for _ in range(8):
        _seed_everything(seed)
        try:
            wf = WorkflowGenerator(recipe_cls.from_num_tasks(tasks)).build_workflow()
            break
        except ValueError as err:  # below the recipe's smallest base graph: take that size
            m = re.search(r"base graph with (\d+) nodes", str(err))
            if m is None:
                raise
            tasks = int(m.group(1))
    else:
        raise RuntimeError(f"{label}: no base graph fits")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "wf.json"
        wf.write_json(path)
        doc = json.loads(path.read_text())
    return canonical(doc)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests" / "data" / "wfcommons"),
                    help="output folder (default: the test data folder)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[TEST_SIZE], help="task counts (default 50)")
    ap.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    ap.add_argument("--seed", type=int, default=2024)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for label in args.recipes:
        for size in args.sizes:
            doc = generate(label, size, args.seed + size)
            n = len(doc["workflow"]["specification"]["tasks"])
            path = out / f"{label}-{n}.json"
            path.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
            print(f"{path}  {n} tasks  {path.stat().st_size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
