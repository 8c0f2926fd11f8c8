package abtest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// LogOptions configure OpenImpressionLog and OpenClickLog.
type LogOptions struct {
	// Buffer is how many encoded lines may wait for the writer (default 4096). When it is full, Log drops
	// the line and counts it rather than wait.
	Buffer int
	// MaxBytes rotates the file once a write would take it past this size: the file is renamed to
	// path.<UTC timestamp> and a new one started; rotated files are never deleted. 0 never rotates.
	MaxBytes int64
	// Logger receives write failures and rotations; nil discards.
	Logger *slog.Logger
}

// maxBatch is the most bytes the writer gathers from the queue into one write.
const maxBatch = 64 << 10

// ImpressionLog appends impressions to a JSONL file, one line per answer, from one writer goroutine fed
// by a bounded queue, so that a slow disk costs dropped lines (counted) and never request latency. Each
// batch the writer gathers is written with one write(2) on an O_APPEND file, so lines never interleave
// and a reader sees whole lines, flushed as soon as the queue is empty. Safe for concurrent use. The
// click log (ClickLog) is the same writer under another name.
type ImpressionLog struct {
	what  string // "impression log" or "click log", for errors and log lines
	path  string
	opts  LogOptions
	log   *slog.Logger
	lines chan []byte
	done  chan struct{}

	mu     sync.RWMutex // guards closed against sends on a closed channel
	closed bool

	written, droppedFull, droppedClosed, failed atomic.Uint64

	// Owned by the writer goroutine.
	f    *os.File
	size int64
	err  error // the first write error, returned by Close
}

// OpenImpressionLog opens (creating, appending) the log at path and starts its writer.
func OpenImpressionLog(path string, opts LogOptions) (*ImpressionLog, error) {
	l, err := openImpressionLog(path, opts)
	if err != nil {
		return nil, err
	}
	go l.run()
	return l, nil
}

// openImpressionLog opens the file without starting the writer (tests start it late, to fill the queue).
func openImpressionLog(path string, opts LogOptions) (*ImpressionLog, error) {
	return openJSONLog("impression log", path, opts)
}

// openJSONLog opens a JSONL log named what (for errors) without starting its writer.
func openJSONLog(what, path string, opts LogOptions) (*ImpressionLog, error) {
	opts.Buffer = cmp.Or(opts.Buffer, 4096)
	l := &ImpressionLog{what: what, path: path, opts: opts, log: opts.Logger, lines: make(chan []byte, opts.Buffer), done: make(chan struct{})}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

// Log queues imp for writing without waiting. It reports false, and counts the drop, when the queue is
// full or the log is closed.
func (l *ImpressionLog) Log(imp Impression) bool { return l.append(imp) }

// append queues v, encoded as one JSON line, as Log does.
func (l *ImpressionLog) append(v any) bool {
	line, err := json.Marshal(v)
	if err != nil { // cannot happen for these types; count it rather than panic
		l.failed.Add(1)
		return false
	}
	line = append(line, '\n')
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		l.droppedClosed.Add(1)
		return false
	}
	select {
	case l.lines <- line:
		return true
	default:
		l.droppedFull.Add(1)
		return false
	}
}

// Close stops taking impressions, writes those queued and closes the file. It is idempotent and returns
// the first write error, if any.
func (l *ImpressionLog) Close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.lines)
	}
	l.mu.Unlock()
	<-l.done
	return l.err
}

// LogCounts are the log's counters since it was opened.
type LogCounts struct {
	// Written lines reached the file.
	Written uint64
	// DroppedFull found the queue full; DroppedClosed came after Close.
	DroppedFull, DroppedClosed uint64
	// Failed were lost to a write error (or could not be encoded).
	Failed uint64
}

// Counts returns the log's counters.
func (l *ImpressionLog) Counts() LogCounts {
	return LogCounts{Written: l.written.Load(), DroppedFull: l.droppedFull.Load(),
		DroppedClosed: l.droppedClosed.Load(), Failed: l.failed.Load()}
}

func (l *ImpressionLog) open() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("open %s: %w", l.what, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("open %s: %w", l.what, err)
	}
	l.f, l.size = f, st.Size()
	return nil
}

// run is the writer: it gathers what is queued into one batch, writes it, and repeats until Close.
func (l *ImpressionLog) run() {
	defer close(l.done)
	batch := make([]byte, 0, maxBatch)
	for line := range l.lines {
		batch = append(batch[:0], line...)
	gather:
		for len(batch) < maxBatch {
			select {
			case more, ok := <-l.lines:
				if !ok {
					break gather
				}
				batch = append(batch, more...)
			default:
				break gather
			}
		}
		l.write(batch)
	}
	if l.f != nil {
		if err := l.f.Close(); err != nil && l.err == nil {
			l.err = fmt.Errorf("close %s: %w", l.what, err)
		}
	}
}

func (l *ImpressionLog) write(batch []byte) {
	n := uint64(bytes.Count(batch, []byte{'\n'}))
	if l.opts.MaxBytes > 0 && l.size > 0 && l.size+int64(len(batch)) > l.opts.MaxBytes {
		l.rotate()
	}
	if l.f == nil { // a failed rotation could not reopen the file; try again
		if err := l.open(); err != nil {
			l.fail(err, n)
			return
		}
	}
	w, err := l.f.Write(batch)
	l.size += int64(w)
	if err != nil {
		l.fail(fmt.Errorf("write %s: %w", l.what, err), n)
		return
	}
	l.written.Add(n)
}

// rotate renames the file to path.<UTC timestamp> and opens a fresh one.
func (l *ImpressionLog) rotate() {
	if err := l.f.Close(); err != nil {
		l.log.Warn("close "+l.what+" for rotation", "path", l.path, "err", err)
	}
	l.f = nil
	to := l.path + "." + time.Now().UTC().Format("20060102T150405.000000000Z")
	if err := os.Rename(l.path, to); err != nil {
		l.log.Error("rotate "+l.what, "path", l.path, "err", err)
	} else {
		l.log.Info(l.what+" rotated", "path", l.path, "rotated_to", to, "bytes", l.size)
	}
	if err := l.open(); err != nil {
		l.log.Error("reopen "+l.what, "path", l.path, "err", err)
	}
}

func (l *ImpressionLog) fail(err error, lines uint64) {
	l.failed.Add(lines)
	if l.err == nil {
		l.err = err
	}
	l.log.Error(l.what+": lines lost", "lines", lines, "err", err)
}

// ClickLog appends clicks to a JSONL file with the impression log's writer: a bounded queue, one writer
// goroutine, whole lines, rotation at MaxBytes. Safe for concurrent use.
type ClickLog struct{ w *ImpressionLog }

// OpenClickLog opens (creating, appending) the click log at path and starts its writer.
func OpenClickLog(path string, opts LogOptions) (*ClickLog, error) {
	w, err := openJSONLog("click log", path, opts)
	if err != nil {
		return nil, err
	}
	go w.run()
	return &ClickLog{w: w}, nil
}

// Log queues c for writing without waiting; false when the queue is full or the log closed (counted).
func (l *ClickLog) Log(c Click) bool { return l.w.append(c) }

// Close writes what is queued and closes the file; idempotent, it returns the first write error.
func (l *ClickLog) Close() error { return l.w.Close() }

// Counts returns the click log's counters since it was opened.
func (l *ClickLog) Counts() LogCounts { return l.w.Counts() }
