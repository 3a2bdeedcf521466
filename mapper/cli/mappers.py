"""``mapper mappers``: list the available mapping algorithms, one per line."""

from __future__ import annotations

import json
import sys

from mapper.mapping import available_mappers


def register(subparsers) -> None:
    p = subparsers.add_parser("mappers", help="list the available mappers",
                              description="List the available mappers: name and summary, one per line.")
    p.add_argument("--json", action="store_true", help="print a JSON list of {name, summary}")
    p.set_defaults(func=run)


def run(args) -> int:
    rows = available_mappers()
    if args.json:
        json.dump([{"name": n, "summary": s} for n, s in rows], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    width = max((len(n) for n, _ in rows), default=0)
    for name, summary in rows:
        print(f"{name:<{width}}  {summary}")
    return 0
