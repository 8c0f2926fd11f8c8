package inference

import (
	"fmt"
	"strconv"
	"strings"
)

// Candidate is one BM25 hit offered to the model: its docid (title) and stored compressed summary.
// An empty Summary puts the candidate in the prompt by title alone.
type Candidate struct {
	Title   string
	Summary string
}

// PromptOptions bound a prompt.
type PromptOptions struct {
	// MaxTokens is the prompt's token budget (header, candidates and query together).
	MaxTokens int
	// MaxSummaryTokens caps each summary, in tokens (the paper compresses to at most 256).
	MaxSummaryTokens int
	// TitleOnly puts every candidate in by title alone (the stage-3 title-context format).
	TitleOnly bool
	// SummaryCandidates, when positive, puts only the first SummaryCandidates candidates in with their
	// summaries and the rest by title alone (a long list at a fraction of its tokens).
	SummaryCandidates int
	// FixedSummaryCap cuts every summary to MaxSummaryTokens whatever the other candidates are, and
	// includes a candidate only when its whole block fits, so that a candidate's block is the same in
	// every prompt (block reading stores it once). Without it the room left is shared by one cap.
	FixedSummaryCap bool
}

// ByTitle reports whether candidate c, the i-th (from 0), goes into the prompt by title alone: every
// candidate with TitleOnly, one without a summary, and one past the first SummaryCandidates.
func (o PromptOptions) ByTitle(i int, c Candidate) bool {
	return o.TitleOnly || c.Summary == "" || o.SummaryCandidates > 0 && i >= o.SummaryCandidates
}

// Prompt is a tokenised prompt and what went into it.
type Prompt struct {
	// IDs is the prompt's token ids.
	IDs []int64
	// InContext is how many candidates, from the first, are in the prompt; later ones were dropped
	// because not even their title fitted the budget.
	InContext int
	// SummaryTokens[i] is how many summary tokens of candidate i were kept.
	SummaryTokens []int
	// Segments are the end offsets in IDs of the header and of each included candidate's block, in
	// order (InContext+1 of them); the query follows the last.
	Segments []int
}

// PromptBuilder tokenises prompts with the manifest's template, following MODEL_FORMAT.md's
// tokenisation rules exactly (segments encoded separately), so the ids match what training produced.
// It builds the template's Format: PromptFormatV1 (0 too) or PromptFormatV2, where every title is a
// segment of its own.
type PromptBuilder struct {
	tok      Tokenizer
	tmpl     Template
	v2       bool
	header   []int64
	sumLeft  string // candidate template before {summary}, with {i} still in
	sumRight string // candidate template after {summary}, with {title} still in (format 1)
	// format 2: the candidate template around {title} after {summary}, and the title-only template
	// around {title}; {i} still in.
	titleLeft, titleRight string
	onlyLeft, onlyRight   string
}

// NewPromptBuilder prepares a builder for tmpl.Format; it encodes the fixed header once.
func NewPromptBuilder(tok Tokenizer, tmpl Template) (*PromptBuilder, error) {
	header, err := tok.Encode(tmpl.Header)
	if err != nil {
		return nil, fmt.Errorf("encode prompt header: %w", err)
	}
	left, right, ok := strings.Cut(tmpl.Candidate, "{summary}")
	if !ok {
		return nil, fmt.Errorf("prompt template: candidate has no {summary}")
	}
	b := &PromptBuilder{tok: tok, tmpl: tmpl, header: header, sumLeft: left, sumRight: right}
	switch tmpl.Format {
	case 0, PromptFormatV1:
	case PromptFormatV2:
		if e := checkTemplateV2(tmpl); e != nil {
			return nil, fmt.Errorf("prompt template: %s: %s", e.field, e.msg)
		}
		b.v2 = true
		b.titleLeft, b.titleRight, _ = strings.Cut(right, "{title}")
		b.onlyLeft, b.onlyRight, _ = strings.Cut(tmpl.CandidateTitleOnly, "{title}")
	default:
		return nil, fmt.Errorf("prompt template: format %d unknown (want %d or %d)", tmpl.Format, PromptFormatV1, PromptFormatV2)
	}
	return b, nil
}

// titleBlock encodes left + title + right for format 2, each a segment of its own ({i} = num in the
// template pieces, never in the title); empty pieces add nothing. The result is never nil.
func (b *PromptBuilder) titleBlock(left, title, right, num string) ([]int64, error) {
	out := make([]int64, 0, 16)
	for _, piece := range []struct {
		text string
		fill bool
	}{{left, true}, {title, false}, {right, true}} {
		if piece.text == "" {
			continue
		}
		text := piece.text
		if piece.fill {
			text = strings.ReplaceAll(text, "{i}", num)
		}
		ids, err := b.tok.Encode(text)
		if err != nil {
			return nil, err
		}
		out = append(out, ids...)
	}
	return out, nil
}

// candidateIDs holds a candidate's encoded pieces: the block around the summary, and the summary.
type candidateIDs struct {
	left, summary, right []int64 // with a summary: left + summary[:k] + right
	titleOnly            []int64 // without one
}

func (c *candidateIDs) overhead() int {
	if c.titleOnly != nil {
		return len(c.titleOnly)
	}
	return len(c.left) + len(c.right)
}

// Build tokenises query and candidates (in their given, BM25, order) under opts. Candidates are taken
// from the first while their block without summary fits; the remaining room is shared by the summaries
// with one cap c, the largest with sum(min(len_i, c)) <= room and c <= MaxSummaryTokens.
func (b *PromptBuilder) Build(query string, cands []Candidate, opts PromptOptions) (Prompt, error) {
	queryIDs, err := b.tok.Encode(strings.ReplaceAll(b.tmpl.Query, "{query}", query))
	if err != nil {
		return Prompt{}, fmt.Errorf("encode query: %w", err)
	}
	used := len(b.header) + len(queryIDs)
	if used > opts.MaxTokens {
		return Prompt{}, fmt.Errorf("prompt of header and query is %d tokens, budget %d: %w", used, opts.MaxTokens, ErrContextFull)
	}
	enc := make([]candidateIDs, 0, len(cands))
	for i, c := range cands {
		var ce candidateIDs
		num := strconv.Itoa(i + 1)
		titleOnly := opts.ByTitle(i, c)
		switch {
		case titleOnly && b.v2:
			if ce.titleOnly, err = b.titleBlock(b.onlyLeft, c.Title, b.onlyRight, num); err != nil {
				return Prompt{}, fmt.Errorf("encode candidate %d: %w", i, err)
			}
		case titleOnly:
			s := strings.NewReplacer("{i}", num, "{title}", c.Title).Replace(b.tmpl.CandidateTitleOnly)
			if ce.titleOnly, err = b.tok.Encode(s); err != nil {
				return Prompt{}, fmt.Errorf("encode candidate %d: %w", i, err)
			}
		default:
			if b.v2 && b.sumLeft == "" {
				ce.left = []int64{}
			} else if ce.left, err = b.tok.Encode(strings.ReplaceAll(b.sumLeft, "{i}", num)); err != nil {
				return Prompt{}, fmt.Errorf("encode candidate %d: %w", i, err)
			}
			if ce.summary, err = b.tok.Encode(c.Summary); err != nil {
				return Prompt{}, fmt.Errorf("encode candidate %d summary: %w", i, err)
			}
			if b.v2 {
				ce.right, err = b.titleBlock(b.titleLeft, c.Title, b.titleRight, num)
			} else {
				ce.right, err = b.tok.Encode(strings.ReplaceAll(b.sumRight, "{title}", c.Title))
			}
			if err != nil {
				return Prompt{}, fmt.Errorf("encode candidate %d: %w", i, err)
			}
		}
		cost := ce.overhead()
		if opts.FixedSummaryCap {
			cost += min(len(ce.summary), opts.MaxSummaryTokens)
		}
		if used+cost > opts.MaxTokens {
			break
		}
		used += cost
		enc = append(enc, ce)
	}
	lens := make([]int, len(enc))
	for i := range enc {
		lens[i] = len(enc[i].summary)
	}
	limit := opts.MaxSummaryTokens
	if !opts.FixedSummaryCap {
		limit = summaryCap(lens, opts.MaxTokens-used, opts.MaxSummaryTokens)
	}
	size := len(b.header) + len(queryIDs) // the prompt's exact length: its ids are allocated once, at that size
	for _, ce := range enc {
		if ce.titleOnly != nil {
			size += len(ce.titleOnly)
		} else {
			size += len(ce.left) + min(len(ce.summary), limit) + len(ce.right)
		}
	}
	p := Prompt{IDs: make([]int64, 0, size), InContext: len(enc), SummaryTokens: make([]int, len(enc)),
		Segments: make([]int, 0, len(enc)+1)}
	p.IDs = append(p.IDs, b.header...)
	p.Segments = append(p.Segments, len(p.IDs))
	for i, ce := range enc {
		if ce.titleOnly != nil {
			p.IDs = append(p.IDs, ce.titleOnly...)
		} else {
			k := min(len(ce.summary), limit)
			p.SummaryTokens[i] = k
			p.IDs = append(p.IDs, ce.left...)
			p.IDs = append(p.IDs, ce.summary[:k]...)
			p.IDs = append(p.IDs, ce.right...)
		}
		p.Segments = append(p.Segments, len(p.IDs))
	}
	p.IDs = append(p.IDs, queryIDs...)
	return p, nil
}

// summaryCap returns the largest c <= maxCap with sum(min(lens[i], c)) <= room (water-filling), by
// binary search on c; the sum is monotone in c.
func summaryCap(lens []int, room, maxCap int) int {
	total := func(c int) int {
		s := 0
		for _, l := range lens {
			s += min(l, c)
		}
		return s
	}
	lo, hi := 0, max(maxCap, 0)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if total(mid) <= room {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}
