#!/usr/bin/env bash
# Build bin/icicle with ONNX Runtime and the HF tokenizer compiled in (installs them first if needed).
# "icicle version" then prints $ICICLE_VERSION, else the release tag vX.Y.Z on HEAD, else the default in
# cmd/icicle/version.go; and the git commit of the checkout (" (modified)" with uncommitted changes).
#
#   scripts/build.sh          build bin/icicle
#   scripts/build.sh --deps   compile its packages into Go's build cache without linking: needs neither native
#                             library, so bootstrap runs it while libtokenizers builds (a cold build's Go half)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# nomsgpack: gin without its MessagePack binding (the sidecar speaks JSON), a large package a cold build
# would otherwise compile.
tags="ort tokenizers nomsgpack"
# No DWARF debug information: a cold build compiles a sixth less (25 of 155 CPU-seconds here) and the binary is
# smaller; panics keep their stack traces (those come from the symbol table). For a debugger, build with plain
# `go build -tags "ort tokenizers" ./cmd/icicle` after `eval "$(scripts/env.sh)"`.
gcflags=-gcflags=all=-dwarf=false
if [[ ${1:-} == --deps ]]; then
  # Everything but the main package and what imports the tokenizer's cgo package (whose cgo step links
  # against libtokenizers.a).
  mapfile -t pkgs < <(go list -tags "$tags" -deps \
    -f '{{if and (not .Standard) (ne .Name "main") (ne .ImportPath "github.com/daulet/tokenizers")}}{{.ImportPath}} {{join .Deps " "}}{{end}}' \
    ./cmd/icicle | grep -v ' github.com/daulet/tokenizers\b' | cut -d' ' -f1 | grep .)
  # The same CGO_ENABLED and CGO_LDFLAGS as the final build (scripts/env.sh), or Go's cache would key every
  # package that depends on a cgo one (net, and so nearly all) differently, and compile them again.
  CGO_ENABLED=1 CGO_LDFLAGS="-L$(scripts/tokenizers.sh --dir)" go build -tags "$tags" "$gcflags" "${pkgs[@]}"
  exit 0
fi
version=${ICICLE_VERSION:-$(git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null || true)}
version=${version#v}
link=(-w)
if [[ -n $version ]]; then
  [[ $version =~ ^[0-9A-Za-z.+-]+$ ]] ||
    { echo "build.sh: ICICLE_VERSION '$version' is not a version (letters, digits, '.', '+', '-')" >&2; exit 2; }
  link+=("-X main.version=$version")
fi
if commit=$(git rev-parse HEAD 2>/dev/null); then
  [[ -z $(git status --porcelain 2>/dev/null) ]] || commit+=" (modified)"
  link+=("-X 'main.commit=$commit'")
fi
eval "$(scripts/env.sh)"
mkdir -p bin
go build -tags "$tags" "$gcflags" -ldflags "${link[*]}" -o bin/icicle ./cmd/icicle
echo "build: bin/icicle ${version:-(default version)} (ICICLE_ORT_LIB=$ICICLE_ORT_LIB)" >&2
