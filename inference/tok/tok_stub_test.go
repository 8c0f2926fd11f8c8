//go:build !tokenizers

package tok

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/inference"
)

func TestStubDisabled(t *testing.T) {
	_, err := Load("tokenizer.json")
	require.ErrorIs(t, err, inference.ErrNativeDisabled)
	var tk Tokenizer
	_, err = tk.Encode("x")
	require.ErrorIs(t, err, inference.ErrNativeDisabled)
	require.NoError(t, tk.Close())
}
