package testenv

import (
	"runtime"

	"golang.org/x/sys/cpu"
)

// Int8Kind names the kind of CPU whose int8 arithmetic the default encoder's vectors depend on: "vnni" (x86 with
// AVX-512 VNNI or AVX-VNNI: ONNX Runtime's u8 x s8 products are exact), "x86-no-vnni" (its products go through an
// instruction that saturates 16-bit pair sums, so the same text gets a slightly other vector: over 300 demo
// passages on an AVX2-only Zen 3, cosine to the VNNI vectors median 0.99963, min 0.99681), or the architecture.
// The shipped vector files and the first golden rankings were made on VNNI cores.
func Int8Kind() string {
	switch {
	case runtime.GOARCH == "amd64" && (cpu.X86.HasAVX512VNNI || cpu.X86.HasAVXVNNI):
		return "vnni"
	case runtime.GOARCH == "amd64":
		return "x86-no-vnni"
	default:
		return runtime.GOARCH
	}
}
