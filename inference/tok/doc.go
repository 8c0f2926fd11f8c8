// Package tok loads a Hugging Face tokenizer.json and encodes text into token ids exactly as the training
// pipeline does (MODEL_FORMAT.md, "Tokenisation rules"): no special tokens are added, and added special
// tokens that occur in the text (such as "[COPY]") are recognised.
//
// The implementation wraps github.com/daulet/tokenizers, a cgo binding to the Rust tokenizers crate, and
// is compiled only with the build tag "tokenizers". It links the static library libtokenizers.a, which
// scripts/tokenizers.sh builds and caches; build and test with
//
//	CGO_LDFLAGS="-L$(scripts/tokenizers.sh)" go test -tags tokenizers ./inference/tok/
//
// Without the tag, Load returns inference.ErrNativeDisabled so that the rest of the module builds and
// tests with CGO disabled.
package tok
