"""Joins flashattn_bench JSON files with a peers JSON (sdpa_peers.py's, or fa3_bench.py's with
FlashAttention-3 beside cuDNN and torch's FA2; all from the same run) into one table: per
(d, causal, seqlen, direction) the TFLOP/s of each backend and ours / fa3, ours / torch-fa2,
ours / cudnn (for the peers present).

usage: python3 bench/peers/join.py PEERS.json OURS.json [OURS2.json ...] > table.md
"""
import json
import sys


def key(row):
    return (row["head_dim"], int(row["causal"]), row.get("seqlen", row.get("seqlen_q")), row["direction"])


def main():
    peers = json.load(open(sys.argv[1]))
    table = {}
    names = []
    for row in peers:
        table.setdefault(key(row), {})[row["backend"]] = row["tflops"]
        if row["backend"] not in names:
            names.append(row["backend"])
    for path in sys.argv[2:]:
        doc = json.load(open(path))
        for row in doc["rows"]:
            name = "ours-" + row["backend"]
            table.setdefault(key(row), {})[name] = row["tflops"]
            if name not in names:
                names.append(name)
    ours = [n for n in names if n.startswith("ours-")]
    ratios = [(o, p) for o in ours for p in ("fa3", "torch-fa2", "cudnn") if p in names]
    header = ["d", "causal", "seqlen", "dir"] + names + [f"{o[5:]}/{p}" for o, p in ratios]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for k in sorted(table):
        v = table[k]
        cells = [str(x) for x in k] + [f"{v[n]:.1f}" if n in v else "-" for n in names]
        cells += [f"{v[o] / v[p]:.2f}" if o in v and p in v else "-" for o, p in ratios]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
