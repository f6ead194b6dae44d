#!/usr/bin/env bash
# Prerequisites and build of the editor plugins, for .ci/run (run before `make test`):
# - Neovim from Debian's packages when `nvim` is missing (the headless Neovim tests in
#   tests/editors skip, saying why, where it cannot be installed), and Debian trixie's and
#   sid's Neovim unpacked under editors/.neovim (editors/fetch_neovim.sh; nothing installed);
# - the VS Code extension: `npm ci`, `npm run compile`, its unit tests with node's test
#   runner, and `vsce package` (editors/vscode/ngramd.vsix);
# - for the real-editor tests (pytest marker `editors`): Debian's chromium, ripgrep, tmux and
#   the build tools of code-server's native modules (as root with apt-get, when missing), then
#   code-server and puppeteer-core into ignored folders of this checkout
#   (editors/install_code_server.sh). Best effort: where a step fails the tests say why
#   (they skip, or fail with CI=true).
set -euo pipefail
cd "$(dirname "$0")"

e2e_packages="chromium ripgrep tmux build-essential pkg-config libkrb5-dev libsecret-1-dev"
missing=$(for p in $e2e_packages; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || echo "$p"; done | xargs)
if [ -z "$missing" ]; then
  echo "editors/ci.sh: $e2e_packages are installed"
elif command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "editors/ci.sh: installing $missing with apt-get"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null; } ||
    echo "editors/ci.sh: apt-get could not install $missing: the real-editor tests will say why"
else
  echo "editors/ci.sh: $missing missing and apt-get unavailable (or not root): the real-editor tests will say why"
fi

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
  cd ..
  bash install_code_server.sh || echo "editors/ci.sh: code-server not installed: the real VS Code test will say why"
else
  echo "editors/ci.sh: node/npm not found: the VS Code extension is not built; its tests will be skipped"
fi
