#!/usr/bin/env bash
# Run on a development machine (one with GoogleTest's sources, e.g. Debian/Ubuntu libgtest-dev)
# before sending the tree to a GPU machine that has no GoogleTest package and no network:
# copies the sources into .deps/googletest, where tests/cpp/CMakeLists.txt looks for them.
# .deps/ is git-ignored, so the device tool must be told to carry it (carry: [".deps"]).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

src=/usr/src/googletest
dest="$FA_ROOT/.deps/googletest"
if [[ ! -f "$src/CMakeLists.txt" ]]; then
  fa_apt_install libgtest-dev || true
fi
[[ -f "$src/CMakeLists.txt" ]] || fa_die "$src not found: install libgtest-dev (it ships the sources there)"

if ! grep -qx '/.deps/' "$FA_ROOT/.gitignore" 2>/dev/null; then
  echo '/.deps/' >>"$FA_ROOT/.gitignore"
  fa_log "added /.deps/ to .gitignore"
fi
rm -rf "$dest"
mkdir -p "$(dirname "$dest")"
cp -r "$src" "$dest"
fa_log "copied $src to $dest ($(du -sh "$dest" | cut -f1)); carry .deps to the GPU machine"
