package adapter

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"strings"
	"unicode/utf8"
)

// CorpusLimits bounds the records ReadCorpus accepts. Zero fields take the defaults.
type CorpusLimits struct {
	// MaxDocIDBytes bounds docid. Default: 512 bytes.
	MaxDocIDBytes int
	// MaxTitleBytes bounds title. Default: 1024 bytes (the title.keyword ignore_above).
	MaxTitleBytes int
	// MaxTextBytes bounds text. Default: 1 MiB.
	MaxTextBytes int
	// MaxSummaryBytes bounds summary. Default: 64 KiB.
	MaxSummaryBytes int
	// MaxLineBytes bounds one JSONL line, escapes and ignored fields included. Default: 8 MiB.
	MaxLineBytes int
}

func (l CorpusLimits) withDefaults() CorpusLimits {
	def := func(v, d int) int {
		if v <= 0 {
			return d
		}
		return v
	}
	return CorpusLimits{
		MaxDocIDBytes:   def(l.MaxDocIDBytes, 512),
		MaxTitleBytes:   def(l.MaxTitleBytes, 1024),
		MaxTextBytes:    def(l.MaxTextBytes, 1<<20),
		MaxSummaryBytes: def(l.MaxSummaryBytes, 64<<10),
		MaxLineBytes:    def(l.MaxLineBytes, 8<<20),
	}
}

// RecordError is one corpus line that was rejected.
type RecordError struct {
	// Line is the 1-based line number in the input.
	Line int
	// DocID is the record's docid if it could be read, else empty.
	DocID string
	// Reason says what is wrong, e.g. "missing title".
	Reason string
}

// Error implements error.
func (e *RecordError) Error() string {
	if e.DocID == "" {
		return fmt.Sprintf("line %d: %s", e.Line, e.Reason)
	}
	return fmt.Sprintf("line %d (docid %q): %s", e.Line, e.DocID, e.Reason)
}

// CorpusReader reads a BEIR-style JSONL corpus: one JSON object per line with "docid" (or BEIR's "_id"),
// "title", "text" and optionally "summary"; other keys are ignored. Bad records are skipped and recorded in
// Rejected; a read error (truncated gzip, I/O) stops the reader and is returned by Err. Documents come out
// with Seen false; the caller decides D_train membership.
type CorpusReader struct {
	r      *bufio.Reader
	closer io.Closer
	limits CorpusLimits

	line     int
	rejected []RecordError
	first    map[string]int // docid -> line it was first seen on
	err      error
	used     bool
}

// NewCorpusReader reads a corpus from r. Zero limits take the defaults.
func NewCorpusReader(r io.Reader, limits CorpusLimits) *CorpusReader {
	return &CorpusReader{r: bufio.NewReaderSize(r, 64<<10), limits: limits.withDefaults(), first: map[string]int{}}
}

// OpenCorpus opens a corpus file, gunzipping it if its name ends in ".gz". Close the reader when done.
func OpenCorpus(path string, limits CorpusLimits) (*CorpusReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open corpus: %w", err)
	}
	var r io.Reader = f
	var closer io.Closer = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("open corpus %s: %w", path, err)
		}
		r = zr
		closer = multiCloser{zr, f}
	}
	c := NewCorpusReader(r, limits)
	c.closer = closer
	return c, nil
}

type multiCloser []io.Closer

func (m multiCloser) Close() error {
	var errs []error
	for _, c := range m {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// Close closes the file opened by OpenCorpus; for a reader from NewCorpusReader it does nothing.
func (c *CorpusReader) Close() error {
	if c.closer == nil {
		return nil
	}
	err := c.closer.Close()
	c.closer = nil
	return err
}

// Rejected returns the records rejected so far, in line order.
func (c *CorpusReader) Rejected() []RecordError { return c.rejected }

// Err returns the error that stopped reading early, or nil if the input was read to the end (or not yet).
func (c *CorpusReader) Err() error { return c.err }

// Lines returns the number of lines read so far.
func (c *CorpusReader) Lines() int { return c.line }

// corpusRecord is one JSONL line. Pointers tell absent from empty only where the message differs.
type corpusRecord struct {
	DocID   string  `json:"docid"`
	ID      string  `json:"_id"`
	Title   *string `json:"title"`
	Text    *string `json:"text"`
	Summary string  `json:"summary"`
}

// All returns the valid documents in input order. The input is read once: a second call yields nothing.
// Stopping the iteration early leaves the rest unread.
func (c *CorpusReader) All() iter.Seq[Doc] {
	return func(yield func(Doc) bool) {
		if c.used {
			return
		}
		c.used = true
		for {
			line, err := c.readLine()
			if errors.Is(err, errLineTooLong) {
				continue
			}
			if len(line) > 0 || err == nil {
				if d, ok := c.parse(line); ok && !yield(d) {
					return
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					c.err = fmt.Errorf("read corpus after line %d: %w", c.line, err)
				}
				return
			}
		}
	}
}

// errLineTooLong marks a line that was skipped for its length; it is a rejection, not a read error.
var errLineTooLong = errors.New("line too long")

// readLine returns the next line without its newline. An over-long line is consumed and returned as nil
// with the rejection already recorded.
func (c *CorpusReader) readLine() ([]byte, error) {
	var buf []byte
	tooLong := false
	for {
		frag, err := c.r.ReadSlice('\n')
		if !tooLong {
			if len(buf)+len(frag) > c.limits.MaxLineBytes+1 {
				tooLong, buf = true, nil
			} else {
				buf = append(buf, frag...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == nil || (errors.Is(err, io.EOF) && (len(buf) > 0 || tooLong)) {
			c.line++
		}
		if tooLong {
			c.reject("", fmt.Sprintf("line longer than %d bytes", c.limits.MaxLineBytes))
			if err != nil {
				return nil, err
			}
			return nil, errLineTooLong
		}
		return bytes.TrimRight(buf, "\r\n"), err
	}
}

func (c *CorpusReader) reject(docid, reason string) {
	c.rejected = append(c.rejected, RecordError{Line: c.line, DocID: docid, Reason: reason})
}

// parse validates one line; it records the rejection and returns false for a bad one. Blank lines are
// skipped silently.
func (c *CorpusReader) parse(line []byte) (Doc, bool) {
	if len(bytes.TrimSpace(line)) == 0 {
		return Doc{}, false
	}
	if !utf8.Valid(line) {
		// encoding/json would quietly turn the bad bytes into U+FFFD; a corrupt file should be noticed.
		c.reject("", fmt.Sprintf("invalid UTF-8 at byte %d", invalidUTF8At(line)))
		return Doc{}, false
	}
	var rec corpusRecord
	if err := json.Unmarshal(line, &rec); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te) && te.Field == "":
			c.reject("", fmt.Sprintf("a JSON %s, want an object", te.Value))
		case errors.As(err, &te):
			c.reject("", fmt.Sprintf("field %q is a JSON %s, want a string", te.Field, te.Value))
		default:
			c.reject("", "invalid JSON: "+err.Error())
		}
		return Doc{}, false
	}
	docid := rec.DocID
	if docid == "" {
		docid = rec.ID
	}
	lim := c.limits
	switch {
	case strings.TrimSpace(docid) == "":
		c.reject("", "missing docid")
	case rec.Title == nil || strings.TrimSpace(*rec.Title) == "":
		c.reject(docid, "missing title")
	case rec.Text == nil || strings.TrimSpace(*rec.Text) == "":
		c.reject(docid, "empty text")
	case len(docid) > lim.MaxDocIDBytes:
		c.reject(truncate(docid), fmt.Sprintf("docid is %d bytes, limit %d", len(docid), lim.MaxDocIDBytes))
	case len(*rec.Title) > lim.MaxTitleBytes:
		c.reject(docid, fmt.Sprintf("title is %d bytes, limit %d", len(*rec.Title), lim.MaxTitleBytes))
	case len(*rec.Text) > lim.MaxTextBytes:
		c.reject(docid, fmt.Sprintf("text is %d bytes, limit %d", len(*rec.Text), lim.MaxTextBytes))
	case len(rec.Summary) > lim.MaxSummaryBytes:
		c.reject(docid, fmt.Sprintf("summary is %d bytes, limit %d", len(rec.Summary), lim.MaxSummaryBytes))
	default:
		if first, dup := c.first[docid]; dup {
			c.reject(docid, fmt.Sprintf("duplicate docid, first on line %d", first))
			return Doc{}, false
		}
		c.first[docid] = c.line
		return Doc{DocID: docid, Title: *rec.Title, Text: *rec.Text, Summary: rec.Summary}, true
	}
	return Doc{}, false
}

func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}

// truncate shortens a value quoted in a rejection so one bad record cannot flood the log.
func truncate(s string) string {
	if len(s) <= 64 {
		return s
	}
	cut := 64
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
