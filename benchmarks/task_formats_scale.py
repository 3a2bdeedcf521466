"""Time and peak memory of ``mapper import dot|gxl`` on large and hostile inputs.

    python benchmarks/task_formats_scale.py [--quick]

Each case runs ``mapper import FORMAT FILE -o OUT.tg`` in a fresh process (the
whole import: reading the file, writing the DSL and reading that back) and
prints its wall time, its exit code and the process's peak resident memory
(``ru_maxrss``). The readers (mapper.frontend.importers.task_formats) are
linear in the input: a streaming tokenizer for DOT and a streaming XML parser
(expat, entities refused) for GXL, with limits on strings, node and edge
counts; the cases past a limit end with exit 2 and say which limit.

Cases: a DOT label string of 10 MB (refused: longer than a string may be),
a DOT graph of 100,000 nodes (a binary out-tree, Weight on every node and
edge), a GXL graph of 200,000 nodes, and a GXL Weight of 2 MB of newlines
around its number (white space, read as one space). ``--quick`` makes every input ten times
smaller. Timings depend on the machine and its load.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

RUN = """
import json, resource, sys, time
from mapper.cli import main
t0 = time.perf_counter()
code = main(sys.argv[1:])
seconds = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
sys.stderr.write("\\nRESULT " + json.dumps({"code": code, "seconds": seconds, "peak": peak}) + "\\n")
"""


def dot_string(path: Path, chars: int) -> None:
    path.write_text('digraph g {\n  a [Weight=1, label="' + "x" * chars + '"];\n}\n')


def dot_tree(path: Path, n: int) -> None:
    with path.open("w") as f:
        f.write("digraph tree {\n")
        f.writelines(f"  n{i} [Weight=3];\n" for i in range(n))
        f.writelines(f"  n{(i - 1) // 2} -> n{i} [Weight=2];\n" for i in range(1, n))
        f.write("}\n")


def gxl_tree(path: Path, n: int) -> None:
    weight = '<attr name="Weight"><int>{}</int></attr>'
    with path.open("w") as f:
        f.write('<gxl><graph id="tree" edgemode="directed">\n')
        f.writelines(f'<node id="n{i}">{weight.format(3)}</node>\n' for i in range(n))
        f.writelines(f'<edge from="n{(i - 1) // 2}" to="n{i}">{weight.format(2)}</edge>\n' for i in range(1, n))
        f.write("</graph></gxl>\n")


def gxl_newlines(path: Path, chars: int) -> None:
    path.write_text('<gxl><graph id="g" edgemode="directed"><node id="a"><attr name="Weight"><int>'
                    + "\n" * chars + "3</int></attr></node></graph></gxl>\n")


def run_case(fmt: str, src: Path, out: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", RUN, "import", fmt, str(src), "-o", str(out)],
                          capture_output=True, text=True)
    result = json.loads(proc.stderr.rsplit("RESULT ", 1)[1])
    lines = [line for line in proc.stderr.splitlines() if line.startswith(("error", str(src)))]
    result["message"] = lines[0][len(str(src)):][:90] if lines else proc.stdout.strip()[:90]
    return result


def main() -> None:
    scale = 10 if "--quick" in sys.argv else 1
    cases = [
        (f"DOT string, {10_000_000 // scale:,} chars", "dot", dot_string, 10_000_000 // scale),
        (f"DOT, {100_000 // scale:,} nodes", "dot", dot_tree, 100_000 // scale),
        (f"GXL, {200_000 // scale:,} nodes", "gxl", gxl_tree, 200_000 // scale),
        (f"GXL Weight, {2_000_000 // scale:,} newlines", "gxl", gxl_newlines, 2_000_000 // scale),
    ]
    print(f"{'case':32s} {'input MB':>8s} {'exit':>4s} {'seconds':>8s} {'peak MB':>8s}  outcome")
    with tempfile.TemporaryDirectory() as tmp:
        for label, fmt, make, size in cases:
            src = Path(tmp) / f"in.{fmt}"
            make(src, size)
            r = run_case(fmt, src, Path(tmp) / "out.tg")
            print(f"{label:32s} {src.stat().st_size / 1e6:8.1f} {r['code']:4d} {r['seconds']:8.2f} "
                  f"{r['peak'] / 1e6:8.0f}  {r['message']}")


if __name__ == "__main__":
    main()
