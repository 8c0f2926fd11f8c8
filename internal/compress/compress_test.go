package compress

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExtractive(t *testing.T) {
	require.Equal(t, "a b c", Extractive("  a\tb\n\nc  "))
	require.Equal(t, "", Extractive(" \n "))
	long := strings.Repeat("word ", 500)
	require.Len(t, strings.Fields(Extractive(long)), LeadWords)
	require.Equal(t, "Zürich – café", Extractive("Zürich\u00a0– café"), "non-breaking space splits like Python's str.split")
}
