#!/usr/bin/env bash
# Prerequisites and build of the editor plugins, for .ci/run (run before `make test`):
# - Neovim from Debian's packages when `nvim` is missing (the headless Neovim tests in
#   tests/editors skip, saying why, where it cannot be installed), and Debian trixie's and
#   sid's Neovim unpacked under editors/.neovim (editors/fetch_neovim.sh; nothing installed);
# - the VS Code extension: `npm ci`, `npm run compile`, its unit tests with node's test
#   runner, and `vsce package` (editors/vscode/ngramd.vsix).
set -euo pipefail
cd "$(dirname "$0")"

if command -v nvim >/dev/null 2>&1; then
  echo "editors/ci.sh: $(nvim --version | head -1)"
elif command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "editors/ci.sh: installing neovim with apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq neovim >/dev/null
  echo "editors/ci.sh: $(nvim --version | head -1)"
else
  echo "editors/ci.sh: nvim is missing and apt-get is unavailable (or not root):" \
       "the Neovim tests will be skipped"
fi

# Newer Neovims for the plugin's version-specific paths (best effort: their tests skip,
# saying why, where Debian's archive cannot be reached): 0.10 from trixie, the newest from sid.
for suite in trixie sid; do
  bash fetch_neovim.sh "$suite" || echo "editors/ci.sh: Debian $suite's Neovim not fetched; its tests will be skipped"
done

if command -v npm >/dev/null 2>&1 && command -v node >/dev/null 2>&1; then
  cd vscode
  echo "editors/ci.sh: node $(node --version), npm $(npm --version)"
  npm ci --no-audit --no-fund
  npm run compile
  node --test out/test/
  npm run package
  ls -l ngramd.vsix
else
  echo "editors/ci.sh: node/npm not found: the VS Code extension is not built; its tests will be skipped"
fi
