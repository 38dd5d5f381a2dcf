#!/usr/bin/env python3
"""Per-loop instruction mix of sm_90a kernels, read from SASS here (no GPU machine needed).

For every kernel of OBJECT whose mangled name matches REGEX, each loop (a backward branch and the
code it jumps back over) holding at least --min-ex2 MUFU.EX2 is printed with its instruction
count and opcode histogram: the steady-state loops of the attention kernels, where every issue
slot counts (docs/PERF.md, twenty-first session: the wgmma descriptors). The counts are static:
a loop's masked and unmasked copies are both in it; --skip-between A B drops the instructions
from address A up to B (a copy the steady state branches over).

usage: tools/sass/loops.py OBJECT [REGEX] [--min-ex2 N] [--skip-between 0xA 0xB]
  e.g. tools/sass/loops.py build-gpu/CMakeFiles/flashattn.dir/src/fa3/fwd_hdim64.cu.o 'Li192E'
"""
import argparse
import collections
import os
import re
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def cuobjdump():
    bin_dir = subprocess.run(["bash", os.path.join(HERE, "prepare.sh")], capture_output=True, text=True, check=True).stdout.strip()
    return os.path.join(bin_dir, "cuobjdump")


def kernels(sass):
    for chunk in re.split(r"\n\s*Function : ", sass)[1:]:
        name, body = chunk.split("\n", 1)
        code = []
        for line in body.split("\n"):
            m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
            if m:
                code.append((int(m.group(1), 16), m.group(2)))
        yield name.strip(), code


def opcode(text):
    words = text.split()
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # (output piped into head)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("object")
    ap.add_argument("regex", nargs="?", default=".")
    ap.add_argument("--min-ex2", type=int, default=8)
    ap.add_argument("--skip-between", nargs=2, metavar=("FROM", "TO"))
    args = ap.parse_args()
    skip = tuple(int(x, 16) for x in args.skip_between) if args.skip_between else None
    sass = subprocess.run([cuobjdump(), "-sass", args.object], capture_output=True, text=True, check=True).stdout
    for name, code in kernels(sass):
        if not re.search(args.regex, name):
            continue
        index = {addr: i for i, (addr, _) in enumerate(code)}
        print(f"{name}: {len(code)} instructions")
        for end, (addr, text) in enumerate(code):
            m = re.search(r"\bBRA\s+(?:U?P\d+,\s*)?0x([0-9a-f]+)", text)
            if not m or int(m.group(1), 16) >= addr or int(m.group(1), 16) not in index:
                continue
            body = [(a, t) for a, t in code[index[int(m.group(1), 16)]:end + 1] if not (skip and skip[0] <= a < skip[1])]
            ex2 = sum("MUFU.EX2" in t for _, t in body)
            if ex2 < args.min_ex2:
                continue
            mix = collections.Counter(opcode(t) for _, t in body)
            print(f"  loop {int(m.group(1), 16):#x}-{addr:#x}: {len(body)} instructions, {ex2} MUFU.EX2")
            print("    " + " ".join(f"{k}:{v}" for k, v in mix.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
