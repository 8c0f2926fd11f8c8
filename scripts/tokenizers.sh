#!/usr/bin/env bash
# Build libtokenizers.a, the static Rust library behind github.com/daulet/tokenizers, from the Go
# module's own sources at the version pinned in go.mod, and cache it by version.
#
#   scripts/tokenizers.sh            build if missing, print the directory holding libtokenizers.a
#   scripts/tokenizers.sh --force    rebuild even if cached (cargo's target dir keeps it incremental)
#   scripts/tokenizers.sh --dir      print the directory that holds (or will hold) libtokenizers.a; build nothing
#
# Link with:  CGO_LDFLAGS="-L$(scripts/tokenizers.sh)" go build -tags tokenizers ./...
# Needs: go, cargo (stable Rust), network to crates.io on a cold build. The Go module itself is verified
# by go.sum when `go mod download` fetches it; the crate set is pinned by the module's Cargo.lock, whose
# sha256 is checked below and built with --locked.
set -euo pipefail

MODULE=github.com/daulet/tokenizers
VERSION=v1.22.1
CARGO_LOCK_SHA256=e10731edb2db6dcbf45a17cc6cf77c2e6cdf261c9951adca1231ac30101d38a7

CACHE=${ICICLE_CACHE:-$HOME/.cache/icicle}
OUT=$CACHE/tokenizers/$VERSION
LIB=$OUT/libtokenizers.a
STAMP=$OUT/.built

die() { echo "tokenizers.sh: $*" >&2; exit 1; }

force=0
case "${1:-}" in
  --force) force=1 ;;
  --dir) echo "$OUT"; exit 0 ;;
  "") ;;
  -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
  *) die "unknown argument '$1' (use --force, --dir or nothing)" ;;
esac

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# The pin must follow go.mod: a mismatched libtokenizers.a fails to link (the Go side references a
# versioned symbol), so refuse early with the fix spelled out.
if command -v go >/dev/null 2>&1; then
  gomod_version=$(cd "$repo_root" && go list -m -f '{{.Version}}' "$MODULE" 2>/dev/null) ||
    die "could not read the $MODULE version from go.mod (run in the repository; is go.mod intact?)"
  [[ $gomod_version == "$VERSION" ]] ||
    die "go.mod requires $MODULE $gomod_version but this script pins $VERSION: update VERSION and CARGO_LOCK_SHA256 in scripts/tokenizers.sh"
else
  die "go not found on PATH (needed to fetch the $MODULE sources): install Go 1.26"
fi

if [[ $force == 0 && -f $LIB && -f $STAMP && $(cat "$STAMP") == "$VERSION $CARGO_LOCK_SHA256" ]]; then
  echo "$OUT"
  exit 0
fi

command -v cargo >/dev/null 2>&1 || die "cargo not found on PATH: install stable Rust (rustup) to build libtokenizers.a"

src=$(cd "$repo_root" && go mod download -json "$MODULE@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[[ -n $src && -d $src ]] || die "go mod download $MODULE@$VERSION gave no source directory (network to the Go module proxy?)"

got=$(sha256sum "$src/Cargo.lock" | cut -d' ' -f1)
[[ $got == "$CARGO_LOCK_SHA256" ]] ||
  die "Cargo.lock of $MODULE@$VERSION has sha256 $got, expected $CARGO_LOCK_SHA256: the module source is not what was pinned; check go.sum and the pin"

# The module cache is read-only; build from a writable copy. The copy and cargo's target dir live in the
# cache so a forced rebuild is incremental.
build=$OUT/build
mkdir -p "$build/src" "$OUT"
rm -rf "$build/src"
cp -R "$src" "$build/src"
chmod -R u+w "$build/src"

echo "tokenizers.sh: building libtokenizers.a for $MODULE@$VERSION (cold build takes minutes)" >&2
start=$(date +%s)
(cd "$build/src" && CARGO_TARGET_DIR="$build/target" cargo build --release --locked --lib) >&2 ||
  die "cargo build failed for $MODULE@$VERSION (see output above; crates.io reachable? rustc recent enough?)"
cp "$build/target/release/libtokenizers.a" "$LIB.tmp"
mv "$LIB.tmp" "$LIB"
echo "$VERSION $CARGO_LOCK_SHA256" >"$STAMP"
echo "tokenizers.sh: built $LIB in $(($(date +%s) - start))s" >&2
echo "$OUT"
