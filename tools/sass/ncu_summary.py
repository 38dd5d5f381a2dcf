#!/usr/bin/env python3
"""Kernels profiled by Nsight Compute side by side: time, cycles, clock, instructions, issue rate,
tensor pipe, and (with the SASS source page) the steady-state loop per warp and the polls.

Each NAME is a pair of files that `ncu -i NAME.ncu-rep --page details --csv` and `--page source
--csv --print-source sass` wrote (NAME-details.csv, NAME-sass.csv; tools/gpu/ncu_vs_fa3.sh writes
them for ours and FlashAttention-3's kernel of one shape). Runs anywhere (no GPU, no ncu).

Cycles, not time, compare kernels: a single launch runs at whatever clock the power draw allows,
and a denser kernel draws more (docs/PERF.md, thirtieth session: FA3's d64 forward at 1.75 GHz
where ours ran at 1.84). The loop is the set of SASS lines executed most often by count (lines of
the steady-state loop run once per key tile and warp); polls are lines executed more often than
that (a barrier's retry loop).

usage: tools/sass/ncu_summary.py NAME [NAME ...] [--keys-per-iteration N [N ...]]
  e.g. tools/sass/ncu_summary.py /tmp/s/ours-2048 /tmp/s/fa3-2048 --keys-per-iteration 128 192
"""
import argparse
import collections
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_opcode_diff import load  # noqa: E402

# (row label, metric name in the details page, scale, format)
METRICS = [
    ("duration (us)", "Duration", None, "{:.1f}"),
    ("elapsed cycles (M)", "Elapsed Cycles", 1e-6, "{:.3f}"),
    ("SM clock (GHz)", "SM Frequency", None, "{:.2f}"),
    ("warp instructions (M)", "Executed Instructions", 1e-6, "{:.1f}"),
    ("cycles per issued instruction", "Warp Cycles Per Issued Instruction", None, "{:.2f}"),
    ("no eligible warp (%)", "No Eligible", None, "{:.1f}"),
    ("tensor pipe, of peak (%)", "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", None, "{:.1f}"),
]


def number(text):
    return float(text.replace(",", ""))


def details(path):
    """{metric name: (value, unit)}, the first row of each name."""
    rows = list(csv.reader(open(path)))
    head = rows[0]
    name_at, unit_at, value_at = head.index("Metric Name"), head.index("Metric Unit"), head.index("Metric Value")
    out = {}
    for r in rows[1:]:
        if len(r) > value_at and r[name_at] not in out:
            try:
                out[r[name_at]] = (number(r[value_at]), r[unit_at])
            except ValueError:
                pass
    return out


def in_microseconds(value, unit):
    return value * {"ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}.get(unit, 1.0)


def loop_and_polls(sass_path):
    """(executions per loop line, loop instructions per iteration, poll instructions executed)."""
    lines = load(sass_path)
    by_count = collections.Counter()
    for _, _, executed, _, _ in lines:
        if executed > 0:
            by_count[round(executed, -3)] += 1
    # The loop: the execution count whose lines hold the most executed instructions.
    loop_count = max(by_count, key=lambda c: c * by_count[c])
    per_iteration = sum(1 for x in lines if abs(x[2] - loop_count) <= max(2e3, 1e-3 * loop_count))
    polls = sum(x[2] for x in lines if x[2] > 1.05 * loop_count)
    return loop_count, per_iteration, polls


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="+", help="NAME of NAME-details.csv (and NAME-sass.csv)")
    ap.add_argument("--keys-per-iteration", type=int, nargs="*", default=[], help="each kernel's key tile, for per-key counts")
    a = ap.parse_args()
    cols = [os.path.basename(n) for n in a.names]
    table = {label: [] for label, *_ in METRICS}
    for n in a.names:
        d = details(n + "-details.csv")
        for label, metric, scale, fmt in METRICS:
            if metric not in d:
                table[label].append("-")
                continue
            value, unit = d[metric]
            if metric == "Duration":
                value = in_microseconds(value, unit)
            table[label].append(fmt.format(value * scale if scale else value))
    extra = collections.OrderedDict((k, []) for k in ("loop instructions per iteration and warp", "loop instructions per key", "polls (M instructions)"))
    for i, n in enumerate(a.names):
        if not os.path.exists(n + "-sass.csv"):
            for v in extra.values():
                v.append("-")
            continue
        _, per_iteration, polls = loop_and_polls(n + "-sass.csv")
        extra["loop instructions per iteration and warp"].append(str(per_iteration))
        keys = a.keys_per_iteration[i] if i < len(a.keys_per_iteration) else 0
        extra["loop instructions per key"].append(f"{per_iteration / keys:.2f}" if keys else "-")
        extra["polls (M instructions)"].append(f"{polls / 1e6:.1f}")
    table.update(extra)
    print("| | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for label, values in table.items():
        print(f"| {label} | " + " | ".join(values) + " |")


if __name__ == "__main__":
    main()
