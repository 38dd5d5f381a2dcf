#!/usr/bin/env bash
# Where each kernel's wgmma waits sit among its exponentials, from an sm_90a object or cubin: per
# kernel, for every `WARPGROUP.DEPBAR.LE gsb0, N`, how many MUFU.EX2 precede it. A wait for the
# P V (forward) or dP^T (backward) wgmmas that precedes the tile's exponentials means the softmax
# no longer overlaps them (ptxas hoists a wait no instruction depends on yet; docs/PERF.md,
# twentieth session). Also prints each kernel's LDL/STL count (local memory).
# usage: tools/sass/waits.sh OBJECT [KERNEL_REGEX]
#   e.g. tools/sass/waits.sh build-gpu/CMakeFiles/flashattn.dir/src/fa3/bwd_hdim64.cu.o 'Li128E'
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
obj="${1:?usage: tools/sass/waits.sh OBJECT [KERNEL_REGEX]}"
pattern="${2:-.}"
bin="$(bash "$(dirname "${BASH_SOURCE[0]}")/prepare.sh")"
"$bin/cuobjdump" -sass "$obj" | awk -v pattern="$pattern" '
  /Function :/ { if (show) report(); name = $NF; show = name ~ pattern; ex2 = 0; local = 0; waits = ""; next }
  !show { next }
  /MUFU\.EX2/ { ex2++ }
  /[^A-Z](LDL|STL)[ .]/ { local++ }
  /WARPGROUP\.DEPBAR\.LE gsb0/ { match($0, /gsb0, 0x[0-9a-f]+/); waits = waits " " substr($0, RSTART + 6, RLENGTH - 6) "@" ex2 }
  function report() { printf "%s\n  EX2 %d, local %d, waits (pending@EX2 before):%s\n", name, ex2, local, waits }
  END { if (show) report() }'
