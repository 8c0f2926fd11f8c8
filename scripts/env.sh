#!/usr/bin/env bash
# Print the environment the native build and tests need, fetching or building the libraries first if
# they are not cached yet:
#
#   eval "$(scripts/env.sh)"
#   go test -tags "ort tokenizers" ./inference/...
#
# CGO_LDFLAGS lets the linker find libtokenizers.a (static, so nothing is needed at run time);
# ICICLE_ORT_LIB is the libonnxruntime.so that inference/ort dlopens at run time (no LD_LIBRARY_PATH
# needed). Pass --gpu for the CUDA build of ONNX Runtime.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tok_dir=$("$here/tokenizers.sh")
ort_lib=$("$here/ort.sh" "$@")
printf 'export CGO_ENABLED=1\n'
printf 'export CGO_LDFLAGS=%q\n' "-L$tok_dir"
printf 'export ICICLE_ORT_LIB=%q\n' "$ort_lib"
