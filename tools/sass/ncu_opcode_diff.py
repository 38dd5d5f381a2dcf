#!/usr/bin/env python3
"""Two kernels' executed instructions per opcode, side by side, from Nsight Compute source pages.

Each input is the SASS source page of one profiled kernel, as
`ncu -i REPORT --page source --csv --print-source sass > NAME-sass.csv` writes it (the report
taken with `--section SourceCounters`; tools/gpu/ncu_source.sh and build-gpu-pre/run43.sh-style
calls do this on the GPU machine). Runs anywhere (no GPU, no ncu): prints each kernel's total of
executed warp instructions, then per opcode (predicates and modifiers dropped) both counts in
millions and their difference, largest first; --top PATTERN lists the single SASS lines of the
first kernel executed most often whose text contains PATTERN (e.g. TRYWAIT: barrier polls).
docs/PERF.md, twenty-third session, call 2, is this tool's first use: ours against FA3's fp8
forward. `load` is also tools/gpu/ncu_source.sh's reader of the same page.

usage: tools/sass/ncu_opcode_diff.py A-sass.csv B-sass.csv [--rows N] [--top PATTERN]
"""
import argparse
import csv
import re
from collections import defaultdict


def load(path):
    """(address, opcode, executed, stall samples, SASS text) per line of the source page."""
    rows = list(csv.reader(open(path)))
    head_at = next(i for i, r in enumerate(rows) if "Address" in r and "Source" in r)
    head = rows[head_at]
    at = {k: head.index(k) for k in ("Address", "Source", "Instructions Executed", "Warp Stall Sampling (All Samples)")}

    def number(x):
        return float(x.replace(",", "")) if x.strip() else 0.0

    lines = []
    for r in rows[head_at + 1:]:
        if len(r) <= max(at.values()):
            continue
        text = r[at["Source"]].strip()
        opcode = re.sub(r"^@!?U?P\w+\s+", "", text).split(" ")[0].split(".")[0]
        lines.append((r[at["Address"]], opcode, number(r[at["Instructions Executed"]]),
                      number(r[at["Warp Stall Sampling (All Samples)"]]), text))
    return lines


def per_opcode(lines, column=2):
    """Sums of one column of load's lines per opcode (2: executed instructions, 3: stall samples)."""
    sums = defaultdict(float)
    for x in lines:
        sums[x[1]] += x[column]
    return sums


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rows", type=int, default=40, help="opcodes to print (default 40)")
    ap.add_argument("--top", default=None, help="list A's most executed lines containing this text")
    args = ap.parse_args()
    a, b = load(args.a), load(args.b)
    total_a, total_b = sum(x[2] for x in a), sum(x[2] for x in b)
    print(f"executed warp instructions: A {total_a / 1e6:.1f} M, B {total_b / 1e6:.1f} M ({total_a / max(total_b, 1):.2f} x)")
    per_a, per_b = per_opcode(a), per_opcode(b)
    print(f"{'opcode':12s} {'A (M)':>9s} {'B (M)':>9s} {'A - B':>9s}")
    for op in sorted(set(per_a) | set(per_b), key=lambda o: -abs(per_a[o] - per_b[o]))[:args.rows]:
        print(f"{op:12s} {per_a[op] / 1e6:9.2f} {per_b[op] / 1e6:9.2f} {(per_a[op] - per_b[op]) / 1e6:+9.2f}")
    if args.top is not None:
        print(f"A's most executed lines containing {args.top!r}:")
        for x in sorted((x for x in a if args.top in x[4]), key=lambda x: -x[2])[:20]:
            print(f"  {x[0]} {x[2] / 1e6:8.3f} M  samples {x[3]:7.0f}  {x[4][:100]}")


if __name__ == "__main__":
    main()
