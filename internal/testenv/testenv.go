// Package testenv decides what a test does when a real part it needs is missing: an Elasticsearch
// node, the ONNX Runtime library, a model fixture. On a developer's machine it skips, saying what to
// set; in CI (scripts/test.sh exports ICICLE_REQUIRE_REAL=1) it fails, so a suite cannot go green by
// skipping its real parts.
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// RequireRealEnv is the environment variable that turns a missing real part into a failure.
const RequireRealEnv = "ICICLE_REQUIRE_REAL"

// RequireReal reports whether RequireRealEnv is set to 1 (or true).
func RequireReal() bool {
	v := os.Getenv(RequireRealEnv)
	return v == "1" || v == "true"
}

// Missing stops t because a real part is missing: t.Fatalf when RequireReal, else t.Skipf. The
// message should say what is missing and how to provide it.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if RequireReal() {
		t.Fatalf("real part missing and %s=1: %s", RequireRealEnv, msg)
	}
	t.Skip(msg)
}
