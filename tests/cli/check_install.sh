#!/bin/sh
# `cmake --install` into a fresh prefix gives a quill that runs there: <prefix>/bin/quill --version. When the default
# model was installed with it (models/fetch_default.sh had fetched it), the installed quill finds it without -m from
# any folder: `info` names <prefix>/share/quill/models/<model> and `run` generates from it.
# Usage: check_install.sh <cmake> <build dir>
set -eu
cmake="$1"
build="$2"
prefix="$(mktemp -d)"
trap 'rm -rf "$prefix"' EXIT
"$cmake" --install "$build" --prefix "$prefix" >/dev/null
"$prefix/bin/quill" --version
model="$prefix/share/quill/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -f "$model" ]; then
    echo "the default model is not in the build's models/: only --version was checked"
    exit 0
fi
cd "$prefix"  # a folder without models/, so that only the installed model can be found
info="$(env -u QUILL_MODEL "$prefix/bin/quill" info)"
echo "$info" | head -1
echo "$info" | grep -q "^file  *$model " || { echo "error: quill info without -m did not read $model" >&2; exit 1; }
env -u QUILL_MODEL "$prefix/bin/quill" run -p "Hello" -n 4 --temp 0 >/dev/null
