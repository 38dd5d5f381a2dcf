#!/usr/bin/env bash
# On the GPU machine, after a build in build-gpu/: the FA3 forward over the peers grid with the
# warpgroup ping-pong on (pp1), off (pp0) and the default (ppd, = on), beside torch SDPA's flash and cuDNN
# backends from the same run. Writes LOGDIR/{pp1,pp0,peers}.json and LOGDIR/table.md.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
logdir="${1:?usage: tools/gpu/fa3_variants.sh LOGDIR}"
mkdir -p "$logdir"
bench="$root/build-gpu/bench/flashattn_bench"
[[ -x "$bench" ]] || { echo "build flashattn_bench first (tools/gpu/bench.sh)" >&2; exit 1; }
# A test build (tools/gpu/test.sh) has the mbarrier hang trap: it costs the d128 kernels registers.
if grep -q '^FLASHATTN_HANG_TRAP:BOOL=ON' "$root/build-gpu/CMakeCache.txt"; then
  echo "build-gpu/ is a test build (FLASHATTN_HANG_TRAP=ON): rebuild with tools/gpu/bench.sh first" >&2
  exit 1
fi
for pp in 1 0 d; do
  if [[ $pp == d ]]; then unset FLASHATTN_FA3_PINGPONG; else export FLASHATTN_FA3_PINGPONG=$pp; fi
  "$bench" --backend fa3 --grid peers --direction fwd --json "$logdir/pp$pp.json" \
    >"$logdir/pp$pp.txt"
done
python3 "$root/bench/peers/sdpa_peers.py" --direction fwd --json "$logdir/peers.json" >"$logdir/peers.txt"
# join.py names columns by backend; rename so the two runs get their own columns.
python3 - "$logdir" <<'PY'
import json, sys
d = sys.argv[1]
for pp in ("1", "0", "d"):
    doc = json.load(open(f"{d}/pp{pp}.json"))
    for r in doc["rows"]:
        r["backend"] = f"fa3-pp{pp}"
    json.dump(doc, open(f"{d}/pp{pp}.json", "w"))
PY
python3 "$root/bench/peers/join.py" "$logdir/peers.json" "$logdir/pp1.json" "$logdir/pp0.json" "$logdir/ppd.json" | tee "$logdir/table.md"
