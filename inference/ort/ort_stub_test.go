//go:build !ort

package ort

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/inference"
)

func TestStubDisabled(t *testing.T) {
	require.ErrorIs(t, Init("libonnxruntime.so"), inference.ErrNativeDisabled)
	_, err := Load("model.onnx", inference.Spec{}, Options{}, nil)
	require.ErrorIs(t, err, inference.ErrNativeDisabled)
	var m Model
	_, err = m.Forward(t.Context(), inference.Step{}, nil)
	require.ErrorIs(t, err, inference.ErrNativeDisabled)
	require.NoError(t, m.Close())
	require.NoError(t, Shutdown())
}
