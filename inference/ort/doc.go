// Package ort runs the decoder (model.onnx, MODEL_FORMAT.md) with ONNX Runtime through
// github.com/yalue/onnxruntime_go, implementing inference.Model.
//
// ONNX Runtime is a shared library loaded at run time (dlopen), not linked: scripts/ort.sh fetches a
// pinned build and prints its path. One runtime environment exists per process: cmd/ calls Init with the
// library path at start-up and Shutdown on exit; Load may be called any number of times in between.
//
//	ICICLE_ORT_LIB=$(scripts/ort.sh) go test -tags ort ./inference/ort/
//
// Data flow of one Forward: the step's ids, positions, mask and logits index, and the valid prefix of each
// layer's KV cache, are wrapped as tensors without copying (onnxruntime_go's NewTensor hands ONNX
// Runtime a pointer into the Go slice); logits and present.* are written by ONNX Runtime straight into
// buffers owned by the Model, and present.* is then appended to the cache (n positions, the only copy).
//
// The package compiles to its real implementation only with the build tag "ort". Without it, Init and
// Load return inference.ErrNativeDisabled so the module builds and tests with CGO disabled. C types never
// appear in the exported API.
package ort
