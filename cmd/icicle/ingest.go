package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/icicle-search/sidecar/adapter"
	"github.com/icicle-search/sidecar/config"
	"github.com/icicle-search/sidecar/inference/dense"
	"github.com/icicle-search/sidecar/inference/ort"
	"github.com/icicle-search/sidecar/internal/compress"
	"github.com/icicle-search/sidecar/internal/dataset"
	"github.com/icicle-search/sidecar/internal/vecfile"
)

func ingest(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
	var cf configFlags
	cf.register(fs, "YAML config file")
	corpus := fs.String("corpus", "data/nq_qed/corpus.jsonl.gz", "BEIR corpus JSONL (.gz allowed): docid, title, text, optional summary")
	modelDir := fs.String("model-dir", "", "model directory whose seen_docids.txt marks documents seen (default: model.dir from config)")
	refresh := fs.Bool("refresh", true, "make documents searchable before returning")
	flushTimeout := fs.Duration("flush-timeout", 2*time.Minute, "timeout of one bulk request (at least elasticsearch.request_timeout)")
	bulkWorkers := fs.Int("workers", 2, "bulk requests in flight at once (1 writes the corpus in its own order)")
	replace := fs.Bool("replace", false, "overwrite a stored document whose text differs (default: report it as failed, \"docid taken\": another document with the same title)")
	quiet := fs.Bool("quiet", false, "no progress line on stderr (there is none when stderr is not a terminal)")
	compressorKind := fs.String("compressor", "", "summaries of documents without one: extractive or llm (default: compressor.kind from config, extractive)")
	llmURL := fs.String("llm-url", "", "OpenAI-compatible base URL up to /v1 for -compressor llm (default: compressor.llm_url)")
	llmModel := fs.String("llm-model", "", "model name for -compressor llm (default: compressor.llm_model)")
	vectorsFile := fs.String("vectors", "", "precomputed vectors (`icicle vectors`) of the first stage's encoder: a document whose title and text have one is not embedded again")
	encFlags := registerEncoderFlags(fs)
	noVectors := fs.Bool("no-vectors", false, "write documents without the first stage's vectors (`icicle enrich` adds them later; default: embed with first_stage.encoder_dir when set)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := encFlags.check(); err != nil {
		return err
	}
	cfg, err := cf.load()
	if err != nil {
		return err
	}
	began := time.Now()
	var prog *progress
	logOut := io.Writer(os.Stderr)
	if !*quiet && isTerminal(os.Stderr) {
		prog = newProgress(os.Stderr)
		logOut = prog // log lines clear the progress line and redraw it below themselves
	}
	log := newLogger(cfg.Log, logOut)
	dir := *modelDir
	if dir == "" {
		dir = cfg.Model.Dir
	}
	seen, err := readSeen(dir)
	if err != nil {
		return err
	}
	cc := cfg.Compressor
	cc.Kind, cc.LLMURL, cc.LLMModel = cmp.Or(*compressorKind, cc.Kind), cmp.Or(*llmURL, cc.LLMURL), cmp.Or(*llmModel, cc.LLMModel)
	comp, workers, err := newCompressor(cc)
	if err != nil {
		return err
	}
	// A bulk flush of megabytes to a cold or busy node can take longer than a search; ingestion gets its
	// own per-request timeout rather than the one sized for the request path.
	cfg.Elasticsearch.RequestTimeout = max(cfg.Elasticsearch.RequestTimeout, *flushTimeout)
	if *noVectors {
		cfg.FirstStage.EncoderDir = ""
	}
	enc, closeEnc, err := openIngestEncoder(cfg, *encFlags.threads, encFlags.passageRuns(), log)
	if err != nil {
		return err
	}
	defer closeEnc()
	es, err := newAdapter(cfg, vectorDims(enc), log)
	if err != nil {
		return err
	}
	defer es.Close()
	if err := es.EnsureIndex(ctx); err != nil {
		return fmt.Errorf("ensure index: %w", err)
	}
	r, err := adapter.OpenCorpus(*corpus, adapter.CorpusLimits{})
	if err != nil {
		return err
	}
	defer r.Close()
	var compressed atomic.Int64
	var nSeen int
	read := func(yield func(adapter.Doc) bool) {
		for d := range r.All() {
			prog.readSoFar(r.Lines(), len(r.Rejected()))
			d.Seen = seen[d.DocID]
			if d.Seen {
				nSeen++
			}
			if !yield(d) {
				return
			}
		}
	}
	// Documents without a summary get one from the compressor, in corpus order; an LLM compressor runs
	// `workers` requests at once, and its first failure (after retries) stops the ingestion.
	docs, compressErr := compress.Apply(ctx, comp, workers, iter.Seq[adapter.Doc](read),
		func(d *adapter.Doc) (string, string, bool) { return d.Title, d.Text, d.Summary == "" },
		func(d *adapter.Doc, s string) { d.Summary = s; compressed.Add(1) })
	// Read before write, as POST /v1/ingest does: a different document stored under a docid is not
	// overwritten unless -replace. The seen flag is the model's seen_docids.txt here, never kept.
	if *bulkWorkers < 1 {
		return fmt.Errorf("-workers: want at least 1, got %d", *bulkWorkers)
	}
	// One refresh at the end rather than each bulk request waiting for one: the same guarantee for the
	// command, and it also returns on an index whose refresh_interval is -1.
	opts := adapter.IngestOptions{RefreshAtEnd: *refresh, KeepStored: true, Replace: *replace, Workers: *bulkWorkers}
	var precomputed atomic.Int64
	if enc != nil {
		// Each document's vector for the first stage; a stored document with the same text keeps its own, and
		// one in the -vectors file (made by the same encoder) is taken from there.
		opts.Embed, opts.VectorModel = embedDocs(enc), enc.Name()
		if *vectorsFile != "" {
			set, err := vecfile.Read(*vectorsFile)
			if err != nil {
				return err
			}
			if set.Encoder != enc.Name() || set.Dims != enc.Dims() {
				return fmt.Errorf("-vectors %s: made by %s (%d dims), the first stage's encoder is %s (%d dims)",
					*vectorsFile, set.Encoder, set.Dims, enc.Name(), enc.Dims())
			}
			opts.Embed = embedKnown(set, enc.Manifest().Normalize, opts.Embed, &precomputed)
		}
	} else if *vectorsFile != "" {
		return errors.New("-vectors: the first stage has no encoder (first_stage.encoder_dir, -no-vectors): nothing to give vectors to")
	}
	if prog != nil {
		opts.Progress = prog.accounted
		go prog.countTotal(ctx, *corpus)
		prog.start(500 * time.Millisecond)
	}
	rep, err := es.Ingest(ctx, docs, opts)
	prog.readSoFar(r.Lines(), len(r.Rejected()))
	prog.stop()
	if err != nil {
		return fmt.Errorf("ingest %s: %w", *corpus, err)
	}
	if err := compressErr(); err != nil {
		return fmt.Errorf("ingest %s: stopped after %d documents written: %w (rerunning is idempotent)", *corpus, rep.Indexed+rep.Updated, err)
	}
	if err := r.Err(); err != nil {
		return fmt.Errorf("read %s: %w", *corpus, err)
	}
	vectors := "no vectors"
	if enc != nil {
		vectors = fmt.Sprintf("vectors by %s (%d embedded, %d from %s)", enc.Name(), rep.Embedded-int(precomputed.Load()),
			precomputed.Load(), cmp.Or(*vectorsFile, "no -vectors file"))
	}
	fmt.Printf("ingest %s into %s: indexed %d, updated %d, unchanged %d, failed %d, rejected %d; seen %d, summaries computed %d (%s); %s; %.1f s\n",
		*corpus, cfg.Elasticsearch.Index, rep.Indexed, rep.Updated, rep.Unchanged, len(rep.Failed), len(r.Rejected()), nSeen, compressed.Load(), comp.ID(),
		vectors, time.Since(began).Seconds())
	for _, f := range rep.Failed {
		fmt.Printf("  failed %q: %s\n", f.DocID, f.Reason)
	}
	for _, rj := range r.Rejected() {
		fmt.Printf("  rejected %s\n", rj.Error())
	}
	if len(rep.Failed) > 0 {
		return fmt.Errorf("%d documents failed", len(rep.Failed))
	}
	return nil
}

// encoderFlags are -threads and -runs of a command that embeds documents: the encoder's intra-op threads
// and how many passages it embeds at once.
type encoderFlags struct{ threads, runs *int }

func registerEncoderFlags(fs *flag.FlagSet) encoderFlags {
	return encoderFlags{
		threads: fs.Int("threads", 1, "the encoder's threads a passage (0: one per core)"),
		runs: fs.Int("runs", 0, "passages embedded at once, each on -threads threads (0: the cores / -threads, at least 1; "+
			"a worker sharing its machine with N-1 others: cores/N); the vectors do not depend on either"),
	}
}

// check refuses -threads below 0 and -runs below 0.
func (e encoderFlags) check() error {
	if *e.threads < 0 {
		return fmt.Errorf("-threads %d: want 0 (one per core) or more", *e.threads)
	}
	if *e.runs < 0 {
		return fmt.Errorf("-runs %d: want 0 (the cores / -threads) or more", *e.runs)
	}
	return nil
}

// passageRuns is -runs, or for 0 the cores divided by -threads (0 threads: one per core), at least 1: by
// default each core embeds its own passage on one thread, about 1.2-1.3x the documents a second of one
// passage at a time on every core (docs/evaluation.md, "Enrichment over several workers").
func (e encoderFlags) passageRuns() int {
	if *e.runs > 0 {
		return *e.runs
	}
	cores := runtime.GOMAXPROCS(0)
	threads := cmp.Or(*e.threads, cores)
	return max(1, cores/threads)
}

// openIngestEncoder initialises ONNX Runtime and opens the first stage's encoder for a command that
// writes vectors (ingest, enrich, vectors) with threads intra-op threads (0: one per core: such a command
// has the machine to itself unless told otherwise) and runs passages embedded at once; without first_stage.encoder_dir it returns nil and
// nothing to close.
func openIngestEncoder(cfg config.Config, threads, runs int, log *slog.Logger) (*dense.Encoder, func(), error) {
	if cfg.FirstStage.EncoderDir == "" {
		return nil, func() {}, nil
	}
	if err := ort.Init(cfg.Model.ORTLibrary); err != nil {
		return nil, nil, fmt.Errorf("init onnx runtime %q for the first stage's encoder (set model.ort_library or ICICLE_ORT_LIB; or -no-vectors): %w", cfg.Model.ORTLibrary, err)
	}
	fc := cfg.FirstStage
	fc.EncoderThreads = threads
	enc, err := openEncoder(fc, runs, log)
	if err != nil {
		_ = ort.Shutdown()
		return nil, nil, err
	}
	return enc, func() { _ = enc.Close(); _ = ort.Shutdown() }, nil
}

// newCompressor builds the summary compressor of c and the number of documents to compress at once.
func newCompressor(c config.Compressor) (compress.Compressor, int, error) {
	switch c.Kind {
	case config.CompressorExtractive:
		return compress.Lead{}, 1, nil
	case config.CompressorLLM:
		l, err := compress.NewLLM(compress.LLMConfig{URL: c.LLMURL, Model: c.LLMModel, APIKey: c.APIKey,
			Timeout: c.Timeout, MaxRetries: c.MaxRetries, MaxTokens: c.MaxTokens})
		if err != nil {
			return nil, 0, fmt.Errorf("-compressor llm: %w (set -llm-url and -llm-model, or compressor.llm_url and compressor.llm_model)", err)
		}
		return l, max(c.Concurrency, 1), nil
	}
	return nil, 0, fmt.Errorf("-compressor: want %q or %q, got %q", config.CompressorExtractive, config.CompressorLLM, c.Kind)
}

// isTerminal reports whether f is a character device, as a terminal is. /dev/null is one too, which only
// means an unseen progress line; pipes and files are not.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progress draws one self-overwriting line on a terminal: documents done (written, failed or rejected) of
// the total when known, lines read, and the rate of done documents. It redraws at most once per interval,
// from its own goroutine, so the ingest path only touches atomics. It also serves as the log's writer, so a log record clears the
// line, is written, and the line is drawn again below it. A nil *progress does nothing.
type progress struct {
	w        io.Writer
	done     atomic.Int64 // documents Ingest has accounted for (written or failed)
	rejected atomic.Int64 // records the corpus reader rejected
	read     atomic.Int64 // corpus lines read (ahead of done by what the bulk indexer holds)
	total    atomic.Int64 // non-blank lines of the corpus; -1 until counted
	began    time.Time

	mu    sync.Mutex
	shown string // the line currently on screen; empty if none
	quit  chan struct{}
	ended chan struct{}
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, quit: make(chan struct{}), ended: make(chan struct{})}
	p.total.Store(-1)
	return p
}

// accounted is the IngestOptions.Progress callback. Concurrent flushes may report out of order, so it
// keeps the largest count.
func (p *progress) accounted(n int) {
	for {
		cur := p.done.Load()
		if int64(n) <= cur || p.done.CompareAndSwap(cur, int64(n)) {
			return
		}
	}
}

// readSoFar records how many corpus lines have been read and how many of them were rejected.
func (p *progress) readSoFar(lines, rejected int) {
	if p != nil {
		p.read.Store(int64(lines))
		p.rejected.Store(int64(rejected))
	}
}

// countTotal counts the corpus's non-blank lines concurrently with the ingestion, so the total shows up
// when known without delaying the first document. A read error leaves the total unknown.
func (p *progress) countTotal(ctx context.Context, path string) {
	r, err := dataset.Open(path)
	if err != nil {
		return
	}
	defer r.Close()
	br := bufio.NewReaderSize(r, 256<<10)
	buf := make([]byte, 256<<10)
	var n int64
	content := false
	for {
		if ctx.Err() != nil {
			return
		}
		select {
		case <-p.ended:
			return
		default:
		}
		k, err := br.Read(buf)
		for _, b := range buf[:k] {
			switch b {
			case '\n':
				if content {
					n++
				}
				content = false
			case ' ', '\t', '\r':
			default:
				content = true
			}
		}
		if err == io.EOF {
			if content {
				n++
			}
			p.total.Store(n)
			return
		}
		if err != nil {
			return
		}
	}
}

func (p *progress) start(every time.Duration) {
	p.began = time.Now()
	go func() {
		defer close(p.ended)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.quit:
				return
			case <-t.C:
				p.draw(false)
			}
		}
	}()
}

// stop ends the redraws and leaves the final state on its own line.
func (p *progress) stop() {
	if p == nil {
		return
	}
	close(p.quit)
	<-p.ended
	p.draw(true)
}

func (p *progress) line() string {
	done := p.done.Load() + p.rejected.Load()
	secs := time.Since(p.began).Seconds()
	rate := 0.0
	if secs > 0 {
		rate = float64(done) / secs
	}
	var b strings.Builder
	b.WriteString("ingest: " + thousands(done))
	if total := p.total.Load(); total >= 0 {
		b.WriteString("/" + thousands(total) + " docs")
		if total > 0 {
			fmt.Fprintf(&b, " (%d%%)", min(100, done*100/total))
		}
	} else {
		b.WriteString(" docs")
	}
	if read := p.read.Load(); read > done {
		b.WriteString(", " + thousands(read) + " read")
	}
	fmt.Fprintf(&b, ", %.0f docs/s", rate)
	if total := p.total.Load(); rate > 0 && total > done {
		fmt.Fprintf(&b, ", eta %s", (time.Duration(float64(total-done)/rate) * time.Second).Round(time.Second))
	}
	return b.String()
}

func (p *progress) draw(final bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.shown = p.line()
	end := ""
	if final {
		end = "\n"
	}
	fmt.Fprintf(p.w, "\r\033[K%s%s", p.shown, end)
	if final {
		p.shown = ""
	}
}

// Write writes a log record above the progress line.
func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown != "" {
		fmt.Fprint(p.w, "\r\033[K")
	}
	n, err := p.w.Write(b)
	if p.shown != "" {
		fmt.Fprint(p.w, p.shown)
	}
	return n, err
}

// thousands formats n with comma separators: 12,345.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
