#!/usr/bin/env bash
# Fetch the ONNX Runtime shared library that inference/ort loads at run time (onnxruntime_go dlopens it;
# nothing links against it at build time), pinned by version and sha256, cached by version.
#
#   scripts/ort.sh           CPU build from the npm package onnxruntime-node; prints the path of libonnxruntime.so
#   scripts/ort.sh --gpu     CUDA build from the Maven artifact com.microsoft.onnxruntime:onnxruntime_gpu
#                            (linux x64 only; at run time it needs CUDA 12 and cuDNN 9 on the loader path)
#
# Use with:  ICICLE_ORT_LIB=$(scripts/ort.sh) go test -tags ort ./inference/ort/
# Needs: npm (CPU) or mvn (GPU), sha256sum, tar/unzip, network to the npm registry or Maven Central on the
# first run. A second run with the library in place only prints the path.
set -euo pipefail

CPU_PACKAGE=onnxruntime-node
CPU_VERSION=1.30.0
CPU_TGZ_SHA256=6e3390d6b783e7be946fad629292799da28d0b42f84856e50d2c1b0383291e75

GPU_ARTIFACT=com.microsoft.onnxruntime:onnxruntime_gpu
GPU_VERSION=1.29.0
GPU_JAR_SHA256=fe39a98c499fc9be3944dd2bf2fb77d7dc5f152668bf95d8beb1c3d7b22f2a89

CACHE=${ICICLE_CACHE:-$HOME/.cache/icicle}

die() { echo "ort.sh: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "$1 not found on PATH: $2"; }

check_sha() { # file expected what
  local got
  got=$(sha256sum "$1" | cut -d' ' -f1)
  [[ $got == "$2" ]] || die "$3 has sha256 $got, expected $2: the download is corrupt or not the pinned release; delete $1 and retry, or update the pin in scripts/ort.sh deliberately"
}

cpu() {
  local out=$CACHE/ort/$CPU_VERSION lib stamp arch
  lib=$out/lib/libonnxruntime.so
  stamp=$out/.installed
  if [[ -f $lib && -f $stamp && $(cat "$stamp") == "$CPU_TGZ_SHA256" ]]; then
    echo "$lib"
    return
  fi
  case "$(uname -s)/$(uname -m)" in
    Linux/x86_64) arch=x64 ;;
    Linux/aarch64 | Linux/arm64) arch=arm64 ;;
    *) die "no $CPU_PACKAGE build for $(uname -s)/$(uname -m); set ICICLE_ORT_LIB to a libonnxruntime of version >= 1.27 yourself" ;;
  esac
  need npm "install Node.js/npm (apt-get install npm) to fetch $CPU_PACKAGE@$CPU_VERSION"
  need sha256sum "install coreutils"

  local dl=$out/download tgz
  mkdir -p "$dl"
  tgz=$dl/$CPU_PACKAGE-$CPU_VERSION.tgz
  if [[ ! -f $tgz ]]; then
    echo "ort.sh: fetching $CPU_PACKAGE@$CPU_VERSION from the npm registry (~110 MB)" >&2
    (cd "$dl" && npm pack "$CPU_PACKAGE@$CPU_VERSION" --silent >/dev/null 2>"$dl/npm.log") ||
      die "npm pack $CPU_PACKAGE@$CPU_VERSION failed (registry reachable? see $dl/npm.log)"
    [[ -f $tgz ]] || die "npm pack did not produce $tgz (see $dl/npm.log)"
  fi
  check_sha "$tgz" "$CPU_TGZ_SHA256" "$tgz"

  local member=package/bin/napi-v6/linux/$arch/libonnxruntime.so.1
  mkdir -p "$out/lib"
  tar -xzf "$tgz" -C "$dl" "$member" || die "$tgz has no $member: the package layout changed; update scripts/ort.sh"
  mv "$dl/$member" "$out/lib/libonnxruntime.so.1"
  ln -sfn libonnxruntime.so.1 "$lib"
  rm -rf "$dl/package" "$tgz"
  echo "$CPU_TGZ_SHA256" >"$stamp"
  echo "$lib"
}

gpu() {
  local out=$CACHE/ort-gpu/$GPU_VERSION lib stamp
  lib=$out/lib/libonnxruntime.so
  stamp=$out/.installed
  if [[ -f $lib && -f $stamp && $(cat "$stamp") == "$GPU_JAR_SHA256" ]]; then
    echo "$lib"
    return
  fi
  [[ "$(uname -s)/$(uname -m)" == Linux/x86_64 ]] || die "the $GPU_ARTIFACT jar carries a CUDA build for linux x86_64 only"
  need mvn "install Maven (apt-get install maven) to fetch $GPU_ARTIFACT:$GPU_VERSION"
  need unzip "install unzip (apt-get install unzip)"
  need sha256sum "install coreutils"

  local dl=$out/download jar
  mkdir -p "$dl"
  jar=$dl/onnxruntime_gpu-$GPU_VERSION.jar
  if [[ ! -f $jar ]]; then
    echo "ort.sh: fetching $GPU_ARTIFACT:$GPU_VERSION from Maven Central (~640 MB)" >&2
    mvn -q -B dependency:copy -Dartifact="$GPU_ARTIFACT:$GPU_VERSION:jar" -DoutputDirectory="$dl" \
      -Dmdep.useBaseVersion=true >"$dl/mvn.log" 2>&1 ||
      die "mvn dependency:copy $GPU_ARTIFACT:$GPU_VERSION failed (Maven Central reachable? see $dl/mvn.log)"
  fi
  check_sha "$jar" "$GPU_JAR_SHA256" "$jar"

  # The CUDA provider libraries are dlopened from the directory of libonnxruntime.so, so they must sit
  # beside it.
  rm -rf "$dl/x" && mkdir -p "$dl/x" "$out/lib"
  unzip -q -o "$jar" 'ai/onnxruntime/native/linux-x64/libonnxruntime*.so*' -d "$dl/x" ||
    die "$jar has no ai/onnxruntime/native/linux-x64/libonnxruntime*.so: the jar layout changed; update scripts/ort.sh"
  local f
  for f in "$dl"/x/ai/onnxruntime/native/linux-x64/*; do
    case "$(basename "$f")" in
      libonnxruntime4j_jni.so) ;; # the Java binding, not needed from Go
      *) mv "$f" "$out/lib/" ;;
    esac
  done
  [[ -f $lib ]] || die "$jar unpacked without libonnxruntime.so; update scripts/ort.sh"
  [[ -f $out/lib/libonnxruntime.so.1 ]] || ln -sfn libonnxruntime.so "$out/lib/libonnxruntime.so.1"
  rm -rf "$dl/x" "$jar"
  echo "$GPU_JAR_SHA256" >"$stamp"
  echo "$lib"
}

case "${1:-}" in
  "") cpu ;;
  --gpu) gpu ;;
  -h | --help) sed -n '2,12p' "$0" ;;
  *) die "unknown argument '$1' (use --gpu or nothing)" ;;
esac
