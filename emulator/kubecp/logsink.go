package kubecp

import (
	"bytes"
	"io"
	"os"
	"strings"
	"sync"
)

// logFileMaxBytes is where a child's log file is rotated: it is renamed to
// <name>.log.1 (replacing the previous one) and a new one begins, so a node
// keeps at most twice this per child.
const logFileMaxBytes = 4 << 20

// tailLines is how many of a child's last lines a logSink keeps, to say why
// it failed.
const tailLines = 20

// sharedLogMu serialises writes to Config.Log, which every child of every
// Node may share (the emulator hands all its nodes one writer) and which
// need not be safe for concurrent use.
var sharedLogMu sync.Mutex

// logSink is where one child's stdout and stderr go: whole lines, prefixed,
// to the shared Log, and everything to a rotated file. It keeps the last
// lines for error messages.
type logSink struct {
	prefix string
	shared io.Writer // may be nil
	path   string

	mu      sync.Mutex
	file    *os.File
	size    int64
	partial []byte
	tail    []string
}

func newLogSink(prefix string, shared io.Writer, path string) *logSink {
	return &logSink{prefix: prefix, shared: shared, path: path}
}

// Write takes a chunk of output. exec calls it from one goroutine at a
// time; notes from the supervisor come from another, hence the mutex.
func (s *logSink) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writeFile(b)
	s.partial = append(s.partial, b...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			break
		}
		s.line(string(s.partial[:i]))
		s.partial = s.partial[i+1:]
	}
	if len(s.partial) > 64<<10 { // a runaway line without newline
		s.line(string(s.partial))
		s.partial = nil
	}
	return len(b), nil
}

// note writes a line of the supervisor's own, such as a restart.
func (s *logSink) note(msg string) {
	_, _ = s.Write([]byte("kubecp: " + msg + "\n"))
}

func (s *logSink) line(l string) {
	s.tail = append(s.tail, l)
	if len(s.tail) > tailLines {
		s.tail = s.tail[len(s.tail)-tailLines:]
	}
	if s.shared != nil {
		sharedLogMu.Lock()
		_, _ = io.WriteString(s.shared, s.prefix+l+"\n")
		sharedLogMu.Unlock()
	}
}

// writeFile appends to the log file, rotating it first when full. A log
// file that cannot be written is not worth stopping a child for.
func (s *logSink) writeFile(b []byte) {
	if s.file != nil && s.size+int64(len(b)) > logFileMaxBytes {
		_ = s.file.Close()
		s.file = nil
		_ = os.Rename(s.path, s.path+".1")
	}
	if s.file == nil {
		f, err := os.OpenFile(s.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return
		}
		fi, err := f.Stat()
		if err != nil {
			_ = f.Close()
			return
		}
		s.file, s.size = f, fi.Size()
	}
	n, _ := s.file.Write(b)
	s.size += int64(n)
}

// lastLines returns the child's last lines, for an error.
func (s *logSink) lastLines() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.tail, "\n")
}

// close closes the log file; a later Write opens it again.
func (s *logSink) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.file != nil {
		_ = s.file.Close()
		s.file = nil
	}
}
