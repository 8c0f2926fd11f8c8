package ort

// Execution providers accepted in Options.Provider.
const (
	// ProviderCPU runs the model on the CPU; it is the default.
	ProviderCPU = "cpu"
	// ProviderCUDA runs the model on an NVIDIA GPU. It needs the CUDA build of ONNX Runtime
	// (scripts/ort.sh --gpu) and CUDA 12 with cuDNN 9 on the loader path; when the provider cannot be
	// set up on Options.CUDADevice, Load fails with ErrCUDAUnavailable naming the device and the cause
	// (never a silent CPU session), unless Options.CUDAFallbackCPU asks for the CPU instead.
	ProviderCUDA = "cuda"
)

// Options tunes a Model's ONNX Runtime session. The zero value is valid: ONNX Runtime's default thread
// counts on the CPU.
type Options struct {
	// Threads is the number of intra-op threads (parallelism inside one operator, e.g. a MatMul).
	// Default 0: ONNX Runtime's choice (one per physical core).
	Threads int
	// InterOpThreads is the number of threads running independent operators in parallel. Default 0:
	// ONNX Runtime's choice (sequential execution, so it rarely matters for a decoder).
	InterOpThreads int
	// Provider is ProviderCPU or ProviderCUDA. Default "": ProviderCPU.
	Provider string
	// CUDADevice is the GPU ordinal used with ProviderCUDA. Default 0.
	CUDADevice int
	// CUDAFallbackCPU makes Load fall back to a CPU session, with a warning, when ProviderCUDA cannot be
	// set up. Default false: Load fails with ErrCUDAUnavailable.
	CUDAFallbackCPU bool
	// NoSpin stops intra-op threads from spinning while they wait for work, inside a Run too: each
	// operator then wakes them, which makes a Run slower but keeps several sessions on the same cores from
	// spinning against each other (the sidecar sets it with two or more sessions). Default false: the
	// threads spin while a Run works (and after it with SpinBetweenRuns).
	NoSpin bool
	// SpinBetweenRuns keeps the intra-op threads spinning after a Run returns, as ONNX Runtime does by
	// default. Default false: they spin during a Run and stop when the last concurrent Run returns
	// (session.force_spinning_stop), so that between a request's Runs and the next request's the cores go to
	// Elasticsearch and the query encoder, which share them. Measured through the sidecar on 2 cores (b3 by
	// blocks, 10 candidates): the first stage inside a model request 26.8 / 25.7 ms p50 with spinning kept,
	// 21.6 / 20.5 without (what it takes alone), the model's Run unchanged (docs/research, "What a 100-candidate Run can still shed on these cores"). No effect
	// with NoSpin.
	SpinBetweenRuns bool
}
