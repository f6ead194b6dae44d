#!/usr/bin/env bash
# Build llama-cpp-python (the version pyproject's `llamacpp` extra pins) from its source,
# with llamafile's GEMM off and ngramd's exact many-column products in, into the virtual
# environment whose python is $1.
#
# Why from source, and why llamafile off: the default build's multi-token passes round
# otherwise than one-token passes (its llamafile GEMM), so a verified draft could choose
# another token than plain decoding; without it they are bitwise equal (issue 31,
# daemon/runtime/exactness.py checks it at load). pip's wheel cache does not key on
# CMAKE_ARGS, so the cache is never read (--no-cache-dir): a cached default build would
# otherwise be installed silently.
#
# The patch (scripts/llamacpp/exact-gemm.patch, docs/design/batch-invariance.md) gives Q4_1 and
# Q8_0 weights a many-column product on x86 that sums each column as the one-column product
# does, and attention's F16 products a kernel that converts each value once for the columns
# that read it: every pass keeps the bits it had, and costs less. Where it does not apply,
# llama.cpp is built without it, and says so.
#
# Best effort: where it cannot be built (no compiler, no cmake), ngramd still installs and
# serves on torch; this says why and exits 0. Takes minutes (268-454 s measured on 2 cores).
set -u
PY=${1:-.venv/bin/python}
HERE=$(cd "$(dirname "$0")/.." && pwd)
PATCH="$HERE/scripts/llamacpp/exact-gemm.patch"
VERSION=$(sed -n 's/.*"llama-cpp-python==\([^"]*\)".*/\1/p' "$HERE/pyproject.toml" | head -1)
if [ -z "$VERSION" ]; then
    echo "ngramd: no llama-cpp-python pin in pyproject.toml; not building llama.cpp" >&2
    exit 0
fi

PATCH_SUM=$("$PY" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$PATCH")

# Already there, at the pinned version, built without llamafile and with this very patch: nothing to do.
if "$PY" - "$VERSION" "$PATCH_SUM" <<'EOF' 2>/dev/null
import pathlib
import sys

import llama_cpp

ok = llama_cpp.__version__ == sys.argv[1] and b"LLAMAFILE = 1" not in llama_cpp.llama_print_system_info()
applied = pathlib.Path(llama_cpp.__file__).parent / "NGRAMD_PATCH"  # written below after a patched build
sys.exit(0 if ok and applied.is_file() and applied.read_text().strip() == sys.argv[2] else 1)
EOF
then
    echo "ngramd: llama-cpp-python $VERSION (llamafile off, exact many-column products) is installed"
    exit 0
fi

missing=""
for tool in cc c++ cmake; do
    command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
if [ -n "$missing" ]; then
    echo "ngramd: llama.cpp not built: missing$missing. ngramd serves GGUF models on torch (de-quantized);" \
         "install a C/C++ compiler and cmake, then run 'make llamacpp'" >&2
    exit 0
fi

echo "ngramd: building llama-cpp-python $VERSION with llamafile off (several minutes)..."
start=$(date +%s)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source_dir="$work/llama_cpp_python-$VERSION"
target="llama-cpp-python==$VERSION"  # unpatched, straight from the index, when the source cannot be patched
if "$PY" -m pip download --quiet --no-binary llama-cpp-python --no-deps --no-cache-dir \
        -d "$work" "llama-cpp-python==$VERSION"; then
    tar -xzf "$work/llama_cpp_python-$VERSION.tar.gz" -C "$work"
    if command -v patch >/dev/null 2>&1 && patch -d "$source_dir" -p1 --forward --batch --quiet < "$PATCH"; then
        target="$source_dir"
        echo "ngramd: patched with scripts/llamacpp/exact-gemm.patch"
    else
        echo "ngramd: scripts/llamacpp/exact-gemm.patch does not apply (or no 'patch' tool): building" \
             "llama.cpp without it; speculation stays exact, its many-token passes cost more" >&2
    fi
else
    echo "ngramd: could not fetch the llama-cpp-python $VERSION source to patch; building it unpatched" >&2
fi
if CMAKE_ARGS="-DGGML_LLAMAFILE=OFF ${NGRAMD_CMAKE_ARGS:-}" "$PY" -m pip install --no-binary llama-cpp-python \
        --no-cache-dir --force-reinstall --no-deps "$target" \
    && "$PY" -m pip install "llama-cpp-python==$VERSION"; then  # its own dependencies, from the index
    if [ "$target" = "$source_dir" ]; then  # which patch this build has, for the check above
        "$PY" -c 'import llama_cpp, pathlib, sys; (pathlib.Path(llama_cpp.__file__).parent / "NGRAMD_PATCH").write_text(sys.argv[1])' \
            "$PATCH_SUM"
    fi
    echo "ngramd: llama-cpp-python $VERSION built in $(( $(date +%s) - start )) s"
else
    echo "ngramd: llama-cpp-python could not be built (see above). ngramd serves GGUF models on torch" \
         "(de-quantized); fix the build, then run 'make llamacpp'" >&2
fi
exit 0
