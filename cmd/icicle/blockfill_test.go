package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/inference"
)

func TestBlockForms(t *testing.T) {
	base := inference.Options{MaxSummaryTokens: 24}
	require.Equal(t, []inference.Options{base}, blockForms(base), "every candidate with its summary: one form")

	some := base
	some.SummaryCandidates = 10
	title := base
	title.TitleOnly = true
	require.Equal(t, []inference.Options{base, title}, blockForms(some), "the first 10 with summaries: both forms, each for every document")

	only := title
	only.SummaryCandidates = 10
	require.Equal(t, []inference.Options{title}, blockForms(only), "title-only: one form")
}
