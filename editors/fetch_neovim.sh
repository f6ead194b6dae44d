#!/usr/bin/env bash
# Fetch a newer Neovim from Debian's archive, for the plugin's tests, without installing it:
#   editors/fetch_neovim.sh SUITE [DEST]     (SUITE: trixie = 0.10, sid = the newest; DEST: editors/.neovim)
# The packages of SUITE (neovim and the libraries it links, glibc included) are downloaded with
# `apt-get download` against a private package list and unpacked under DEST/SUITE. DEST/SUITE/nvim
# runs that Neovim through the suite's own dynamic loader and libraries, so the system's glibc
# and packages stay untouched. Processes Neovim starts (the language server) run on the system's.
# Needs apt-get, dpkg-deb and the Debian mirror: exits non-zero, saying why, without them.
set -euo pipefail
suite=${1:?usage: fetch_neovim.sh SUITE [DEST]}
dest=$(realpath -m "${2:-$(dirname "$0")/.neovim}")/$suite
mirror=${NGRAMD_DEBIAN_MIRROR:-http://deb.debian.org/debian}

for tool in apt-get apt-cache dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "fetch_neovim.sh: $tool is missing" >&2; exit 1; }
done
if [ -x "$dest/nvim" ] && "$dest/nvim" --version >/dev/null 2>&1; then
  echo "fetch_neovim.sh: $("$dest/nvim" --version | head -1) already in $dest"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
echo "deb $mirror $suite main" > "$work/sources.list"
apt_opts=(-o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" -o Dir::State::status=/dev/null
          -o APT::Sandbox::User="$(id -un)" -o Debug::NoLocking=1)
apt-get "${apt_opts[@]}" -qq update

# neovim, its runtime, and every library it links (names differ between suites), plus glibc.
deps=$(apt-cache "${apt_opts[@]}" depends neovim | awk '/ Depends: [a-z]/ {print $2}' | sort -u)
packages=$(printf '%s\n' neovim neovim-runtime libc6 libgcc-s1 $deps | sort -u)
(cd "$work/debs" && apt-get "${apt_opts[@]}" -qq download $packages)

rm -rf "$dest"
mkdir -p "$dest/root"
for deb in "$work"/debs/*.deb; do
  dpkg-deb -x "$deb" "$dest/root"
done
root="$dest/root"
# the suite's dynamic loader (ld-linux-x86-64.so.2, ld-linux-aarch64.so.1, ...) and its library folder
loader=$(ls "$root"/usr/lib/*-linux-gnu/ld-linux*.so.* 2>/dev/null | head -1)
[ -n "$loader" ] || { echo "fetch_neovim.sh: no dynamic loader in Debian $suite's libc6" >&2; exit 1; }
libdir=$(dirname "$loader")
libs="$libdir:$root/lib/$(basename "$libdir")"
cat > "$dest/nvim" <<EOF
#!/bin/sh
# Debian $suite's Neovim, run with its own loader and libraries (editors/fetch_neovim.sh).
export VIMRUNTIME="$root/usr/share/nvim/runtime"
exec "$loader" --library-path "$libs" "$root/usr/bin/nvim" "\$@"
EOF
chmod +x "$dest/nvim"
echo "fetch_neovim.sh: $("$dest/nvim" --version | head -1) in $dest"
