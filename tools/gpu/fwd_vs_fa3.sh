#!/usr/bin/env bash
# On the GPU machine: the FA3 forward in fp8 (e4m3 q/k/v, bf16 out) and bf16 over the peers grid
# ((b, h) = (16384/s, 2048/d), d 64/128/256, causal and not) on one or more flashattn_bench
# binaries (tools/gpu/bench_ab.sh: two alternating rounds, the better one kept), beside
# FlashAttention-3's fp8 and bf16 forwards built from .anchors in the same call (fa3_anchor.sh
# build fp8, in the background while ours run). Writes LOGDIR/table.md: TFLOP/s per binary, FA3,
# each binary over the first and over FA3.
# usage: tools/gpu/fwd_vs_fa3.sh LOGDIR NAME=BINARY [NAME=BINARY ...]
#   FWD_SEQLENS   sequence lengths (default "2048 8192 16384")
#   FWD_DTYPES    "e4m3 bf16" (default) or one of them
# The nineteenth session's table in docs/PERF.md is this with main=... final=... on an H100.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
logdir="${1:?usage: tools/gpu/fwd_vs_fa3.sh LOGDIR NAME=BINARY [NAME=BINARY ...]}"
shift
(($# >= 1)) || fa_die "name at least one binary"
[[ -d "$FA_ROOT/.anchors/fa3/hopper" ]] || fa_die "no .anchors/fa3: run ../shared/tools/fa3_anchor.sh prepare here first"
mkdir -p "$logdir"
seqlens="${FWD_SEQLENS:-2048 8192 16384}" dtypes="${FWD_DTYPES:-e4m3 bf16}"
(cd "$FA_ROOT" && bash .anchors/tools/fa3_anchor.sh build fp8) >"$logdir/fa3-build.log" 2>&1 &
build=$!
cases=""
for dt in $dtypes; do
  flags="--backend fa3 --direction fwd --no-naive"
  [[ "$dt" == e4m3 ]] && flags="$flags --dtype e4m3"
  for d in 64 128 256; do for c in 0 1; do for s in $seqlens; do
    cases="$cases;$flags --shape $((16384 / s)),$s,$s,$((2048 / d)),$d --causal $c"
  done; done; done
done
# bench_ab.sh wants two binaries; one named twice compares it with itself.
(($# == 1)) && set -- "$1" "$1"
BENCH_AB_METRIC=tflops BENCH_AB_ROUNDS=2 BENCH_AB_CASES="${cases#;}" bash "$FA_ROOT/tools/gpu/bench_ab.sh" "$logdir/ours" "$@" >/dev/null
wait "$build" || fa_die "FlashAttention-3's build failed ($logdir/fa3-build.log)"
export PYTHONPATH="$FA_ROOT/.anchors/fa3/hopper"
lens="$(echo $seqlens | tr ' ' ',')"
for dt in $dtypes; do
  grid=fp8 extra=()
  [[ "$dt" == bf16 ]] && grid=peers extra=(--direction fwd)
  python3 "$FA_ROOT/.anchors/tools/fa3_bench.py" --grid "$grid" "${extra[@]}" --seqlens "$lens" --no-sdpa \
    --json "$logdir/fa3-$dt.json" >"$logdir/fa3-$dt.txt"
done
python3 - "$logdir" "$dtypes" "$@" <<'PY' | tee "$logdir/table.md"
import collections, json, sys
logdir, dtypes, names = sys.argv[1], sys.argv[2].split(), []
for e in sys.argv[3:]:
    if e.split("=", 1)[0] not in names:
        names.append(e.split("=", 1)[0])
ours = collections.defaultdict(dict)
for line in open(f"{logdir}/ours/ab.tsv"):
    name, case, _, value = line.rstrip("\n").split("\t")
    a = case.split()
    b, s, _, h, d = map(int, a[a.index("--shape") + 1].split(","))
    key = ("e4m3" if "e4m3" in a else "bf16", d, int(a[a.index("--causal") + 1]), s)
    if value != "failed":
        ours[key][name] = max(ours[key].get(name, 0.0), float(value))
fa3 = {}
for dt in dtypes:
    for r in json.load(open(f"{logdir}/fa3-{dt}.json")):
        fa3[(dt, r["head_dim"], int(r["causal"]), r["seqlen_q"])] = r["tflops"]
cols = names + ["FA3"] + [f"{n} / {names[0]}" for n in names[1:]] + [f"{n} / FA3" for n in names]
print("| dtype | d | causal | seqlen | " + " | ".join(cols) + " |")
print("|---" * (4 + len(cols)) + "|")
for key in sorted(ours):
    row, x = ours[key], fa3.get(key)
    vals = [f"{row[n]:.0f}" if n in row else "-" for n in names] + [f"{x:.0f}" if x else "-"]
    vals += [f"{row[n] / row[names[0]]:.3f}" if n in row and names[0] in row else "-" for n in names[1:]]
    vals += [f"{row[n] / x:.2f}" if n in row and x else "-" for n in names]
    print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | " + " | ".join(vals) + " |")
PY
