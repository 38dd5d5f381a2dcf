"""Joins flashattn_bench JSON files with peers JSON files (sdpa_peers.py's, or fa3_bench.py's with
FlashAttention-3 beside cuDNN and torch's FA2; all from the same run) into tables with ratios
ours / fa3, ours / torch-fa2, ours / cudnn (for the peers present):
  - the peers grid: per (precision, d, causal, seqlen, direction), TFLOP/s of each backend;
  - decode rows (fwd_kvcache: a few queries over a longer cache): per (batch, seqlen_q, seqlen_k,
    heads, d, page, append), GB/s of K+V read by each backend.

usage: python3 bench/peers/join.py PEERS.json OURS.json [MORE.json ...] > table.md
A file is ours when it is a flashattn_bench document ({"rows": [...]}), a peers file when it is a
list of rows; any number of each, in any order.
"""
import json
import sys

RATIO_PEERS = ("fa3", "fa3-fp8", "torch-fa2", "cudnn")


def seqlens(row):
    sq = row.get("seqlen_q", row.get("seqlen"))
    return sq, row.get("seqlen_k", sq)


def is_decode(row):
    if "kvcache" in row:  # ours
        return bool(row["kvcache"])
    sq, sk = seqlens(row)
    return sq < sk


def precision(row):
    """fp8 rows (ours' e4m3, fa3_bench.py's fa3-fp8) and 16-bit rows are separate table rows."""
    return "fp8" if "e4m3" in str(row.get("dtype", "")) else "16-bit"


def peers_key(row):
    return (precision(row), row["head_dim"], int(row["causal"]), seqlens(row)[0], row["direction"])


def decode_key(row):
    sq, sk = seqlens(row)
    page = row.get("page_size")
    if page is None:  # fa3_bench.py names its paged rows (page 256) by backend
        page = 256 if row["backend"].endswith("-paged") else 0
    # One query row sees every key with or without the causal mask: such rows join as causal.
    causal = int(row["causal"]) if sq > 1 else 1
    return (row["batch"], sq, sk, row["heads_q"], row["heads_k"], row["head_dim"], causal, page,
            int(bool(row.get("append", False))))


def decode_cells(key):
    cells = [str(x) for x in key]
    cells[7] = "dense" if key[7] == 0 else cells[7]
    return cells


def backend_name(row, ours):
    if ours:
        return "ours-" + row["backend"]
    name = row["backend"]
    return name[: -len("-paged")] if name.endswith("-paged") else name  # the page is in the key


def print_table(title, header, table, names, fmt, key_cells=lambda key: [str(x) for x in key]):
    if not table:
        return
    ours = [n for n in names if n.startswith("ours-")]
    ratios = [(o, p) for o in ours for p in RATIO_PEERS if p in names]
    header = header + names + [f"{o}/{p}" for o, p in ratios]
    if title:
        print(f"\n{title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for k in sorted(table):
        v = table[k]
        cells = key_cells(k) + [fmt.format(v[n]) if n in v else "-" for n in names]
        cells += [f"{v[o] / v[p]:.2f}" if o in v and p in v else "-" for o, p in ratios]
        print("| " + " | ".join(cells) + " |")


def main():
    grids = {"peers": ({}, []), "decode": ({}, [])}
    for path in sys.argv[1:]:
        doc = json.load(open(path))
        ours = isinstance(doc, dict)
        for row in doc["rows"] if ours else doc:
            decode = is_decode(row)
            table, names = grids["decode" if decode else "peers"]
            name = backend_name(row, ours)
            key = decode_key(row) if decode else peers_key(row)
            table.setdefault(key, {})[name] = row["gbps"] if decode else row["tflops"]
            if name not in names:
                names.append(name)
    print_table("", ["precision", "d", "causal", "seqlen", "dir"], *grids["peers"], "{:.1f}")
    print_table("Decode: GB/s of K+V read", ["b", "sq", "sk", "h_q", "h_k", "d", "causal", "page", "append"],
                *grids["decode"], "{:.0f}", decode_cells)


if __name__ == "__main__":
    main()
