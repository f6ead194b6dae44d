#!/usr/bin/env bash
# Install code-server (VS Code in the browser) for the end-to-end test of the VS Code
# extension (tests/editors/test_vscode_real.py), into editors/.code-server (ignored by git;
# nothing global, nothing in the home folder), and puppeteer-core for the test's driver
# (tests/editors/vscode_e2e/node_modules):
#   editors/install_code_server.sh
# code-server 4.100.3 is the last release for Node.js 20. Its npm postinstall downloads
# ripgrep from GitHub, which build machines may not reach, so the package is installed with
# --ignore-scripts and the postinstall's steps (code-server's postinstall.sh) run here, with
# Debian's rg (package ripgrep) in place of @vscode/ripgrep's download; node-pty's build
# runs `npx node-gyp`, which needs npm_config_yes=true without a terminal; argon2 is rebuilt.
# Needs node 20, npm, a C/C++ toolchain, pkg-config, libkrb5-dev, libsecret-1-dev and rg
# (editors/ci.sh installs the Debian packages). Exits non-zero, saying why, when a step fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=4.100.3
prefix=$here/.code-server
pkg=$prefix/node_modules/code-server
stamp=$prefix/installed-$version
export npm_config_yes=true npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false

for tool in node npm rg; do
  command -v "$tool" >/dev/null || { echo "install_code_server.sh: $tool is missing" >&2; exit 1; }
done
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" = 20 ] || { echo "install_code_server.sh: code-server $version needs node 20, not $(node --version)" >&2; exit 1; }

if [ -f "$stamp" ]; then
  echo "install_code_server.sh: code-server $version already in $prefix"
else
  rm -rf "$prefix"
  mkdir -p "$prefix"
  echo '{"private": true}' > "$prefix/package.json"
  echo "install_code_server.sh: code-server $version into $prefix"
  (cd "$prefix" && npm install --ignore-scripts --no-save "code-server@$version")
  (cd "$prefix" && npm rebuild argon2)
  # postinstall.sh's vscode_install, scripts held back until rg is in place
  cd "$pkg/lib/vscode"
  npm install --omit=dev --ignore-scripts
  mkdir -p node_modules/@vscode/ripgrep/bin
  cp "$(command -v rg)" node_modules/@vscode/ripgrep/bin/rg
  npm rebuild
  rm -rf node_modules.asar && ln -s node_modules node_modules.asar
  (cd bin/remote-cli && rm -rf code-server && ln -s code-linux.sh code-server)
  (cd bin/helpers && rm -rf browser.sh && ln -s browser-linux.sh browser.sh)
  (cd extensions && npm install --omit=dev)
  touch "$stamp"
fi
# code-server writes a config file and logs even for --version: into a scratch folder
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
installed=$(XDG_CONFIG_HOME=$scratch/config XDG_DATA_HOME=$scratch/data HOME=$scratch \
            node "$pkg/out/node/entry.js" --version | tail -1)
echo "install_code_server.sh: code-server $installed"

# puppeteer-core (it downloads no browser: the test drives Debian's chromium)
driver=$here/../tests/editors/vscode_e2e
if [ ! -f "$driver/node_modules/puppeteer-core/package.json" ]; then
  (cd "$driver" && npm ci)
fi
echo "install_code_server.sh: puppeteer-core $(node -p "require('$driver/node_modules/puppeteer-core/package.json').version")"
