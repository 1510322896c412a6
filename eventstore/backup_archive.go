package eventstore

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"path"
	"regexp"
	"strings"
	"time"
)

// A backup archive is a tar (optionally gzip-compressed; readers detect it)
// of these entries, in this order:
//
//	manifest.json                 BackupManifest: format, version, time, source, the streams in order
//	keys/<file>                   the embedded server's trust material (nats-keys), when carried
//	streams/<name>/stream.json    BackupStream: the stream's config and state as of its snapshot
//	streams/<name>/part-NNNNNN    the JetStream snapshot of the stream, in parts of at most backupPartSize
//	streams/<name>/end.json       backupStreamEnd: the snapshot's size, parts and sha256
//	end.json                      backupEnd: how many streams; its absence means the file was cut short
//
// Snapshots arrive in chunks of unknown total size and a tar entry needs its
// size up front, so a stream is written in parts, each buffered in memory
// (at most backupPartSize) and never the whole stream.

// BackupFormat names the archive format in its manifest.
const BackupFormat = "rezuscloud-backup"

// BackupVersion is the archive version this code writes and reads.
const BackupVersion = 1

// backupPartSize bounds a snapshot part: the memory a backup holds per stream.
const backupPartSize = 4 << 20

// backupMaxJSON bounds the JSON entries and key files a reader accepts, so a
// foreign file cannot make it allocate without bound.
const backupMaxJSON = 4 << 20

const (
	backupManifestName = "manifest.json"
	backupEndName      = "end.json"
)

// BackupManifest is the first entry of an archive.
type BackupManifest struct {
	Format    string    `json:"format"`
	Version   int       `json:"version"`
	CreatedAt time.Time `json:"createdAt"`
	// Source says what wrote it: RezusCloud's and the NATS server's versions,
	// and whether the server was serving (online) or stopped (offline).
	Source BackupSource `json:"source"`
	// Streams are the application account's streams in the order they follow.
	Streams []string `json:"streams"`
	// Keys are the files of the keys dir (KeysDir) the archive carries; none
	// when the backup came from an external NATS.
	Keys []string `json:"keys,omitempty"`
}

// BackupSource describes the server a backup was taken from.
type BackupSource struct {
	Version    string `json:"version"`
	NATSServer string `json:"natsServer"`
	Mode       string `json:"mode"`
}

// BackupStream is a stream's header in the archive: its configuration and
// its state as of the snapshot (what its restore must reproduce).
type BackupStream struct {
	Name   string          `json:"name"`
	Config json.RawMessage `json:"config"`
	State  json.RawMessage `json:"state"`
	// Messages, FirstSeq and LastSeq repeat State's counts for readers of the manifest.
	Messages uint64 `json:"messages"`
	FirstSeq uint64 `json:"firstSeq"`
	LastSeq  uint64 `json:"lastSeq"`
}

// backupStreamEnd closes a stream's snapshot.
type backupStreamEnd struct {
	Bytes  int64  `json:"bytes"`
	Parts  int    `json:"parts"`
	SHA256 string `json:"sha256"`
}

// backupEnd closes the archive.
type backupEnd struct {
	Streams int `json:"streams"`
}

// streamState is the part of JetStream's stream state a backup checks.
type streamState struct {
	Msgs     uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
}

// streamNameRE is what a stream name in an archive may be: JetStream's
// names, without path separators, dots or wildcards.
var streamNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)

// keyFileRE is what a carried key file may be called.
var keyFileRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,200}\.(nk|jwt)$`)

// archiveWriter writes the entries of an archive.
type archiveWriter struct {
	tw  *tar.Writer
	now time.Time
}

func (a *archiveWriter) file(name string, data []byte) error {
	if err := a.tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(data)), ModTime: a.now, Typeflag: tar.TypeReg}); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if _, err := a.tw.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}

func (a *archiveWriter) json(name string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return a.file(name, append(data, '\n'))
}

// streamParts cuts one stream's snapshot into parts as its chunks arrive.
type streamParts struct {
	a     *archiveWriter
	name  string
	buf   bytes.Buffer
	parts int
	bytes int64
	sum   hash.Hash
}

func (p *streamParts) write(chunk []byte) error {
	for len(chunk) > 0 {
		n := min(len(chunk), backupPartSize-p.buf.Len())
		p.buf.Write(chunk[:n])
		chunk = chunk[n:]
		if p.buf.Len() == backupPartSize {
			if err := p.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *streamParts) flush() error {
	if p.buf.Len() == 0 {
		return nil
	}
	p.parts++
	p.bytes += int64(p.buf.Len())
	p.sum.Write(p.buf.Bytes())
	if err := p.a.file(fmt.Sprintf("streams/%s/part-%06d", p.name, p.parts), p.buf.Bytes()); err != nil {
		return err
	}
	p.buf.Reset()
	return nil
}

func (p *streamParts) end() error {
	if err := p.flush(); err != nil {
		return err
	}
	return p.a.json("streams/"+p.name+"/end.json", backupStreamEnd{Bytes: p.bytes, Parts: p.parts, SHA256: hex.EncodeToString(p.sum.Sum(nil))})
}

// archiveVisitor receives an archive's contents, in order, as a reader
// checks them. Stream data is handed over in pieces; a stream's end comes
// only after its size and sha256 matched.
type archiveVisitor interface {
	manifest(m *BackupManifest) error
	key(name string, data []byte) error
	streamStart(s *BackupStream) error
	streamData(p []byte) error
	streamEnd(s *BackupStream) error
}

// ErrNotBackup is returned for a file that is not a RezusCloud backup.
var ErrNotBackup = errors.New("not a rezuscloud backup archive")

// ErrBackupTruncated is returned for an archive that ends early.
var ErrBackupTruncated = errors.New("the backup archive is truncated")

// readArchive reads an archive from r (plain or gzip-compressed tar),
// checks its order, sizes and checksums, and hands its contents to v.
func readArchive(r io.Reader, v archiveVisitor) (*BackupManifest, error) {
	br := bufio.NewReader(r)
	var src io.Reader = br
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNotBackup, err)
		}
		defer zr.Close()
		src = zr
	}
	ar := &archiveReader{tr: tar.NewReader(src), v: v}
	return ar.read()
}

type archiveReader struct {
	tr  *tar.Reader
	v   archiveVisitor
	hdr *tar.Header
	// peeked is set when hdr was read but not consumed.
	peeked bool
}

// next returns the next entry's header; io.EOF at a clean end, and
// ErrBackupTruncated when the tar itself is cut short.
func (a *archiveReader) next() (*tar.Header, error) {
	if a.peeked {
		a.peeked = false
		return a.hdr, nil
	}
	h, err := a.tr.Next()
	if err == io.EOF {
		return nil, io.EOF
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, ErrBackupTruncated
	}
	if err != nil {
		return nil, fmt.Errorf("reading the archive: %w", err)
	}
	if h.Typeflag != tar.TypeReg {
		return nil, fmt.Errorf("unexpected entry %q of type %c in the archive", h.Name, h.Typeflag)
	}
	a.hdr = h
	return h, nil
}

// expect reads the next entry, which must be called name.
func (a *archiveReader) expect(name string) (*tar.Header, error) {
	h, err := a.next()
	if err == io.EOF {
		return nil, fmt.Errorf("%w: it ends before %s", ErrBackupTruncated, name)
	}
	if err != nil {
		return nil, err
	}
	if h.Name != name {
		return nil, fmt.Errorf("the archive has %q where %q belongs", h.Name, name)
	}
	return h, nil
}

// small reads the current entry whole, bounded by backupMaxJSON.
func (a *archiveReader) small(h *tar.Header) ([]byte, error) {
	if h.Size < 0 || h.Size > backupMaxJSON {
		return nil, fmt.Errorf("entry %q is %d bytes; at most %d expected", h.Name, h.Size, backupMaxJSON)
	}
	data := make([]byte, h.Size)
	if _, err := io.ReadFull(a.tr, data); err != nil {
		return nil, truncated(err, h.Name)
	}
	return data, nil
}

func (a *archiveReader) json(name string, v any) error {
	h, err := a.expect(name)
	if err != nil {
		return err
	}
	data, err := a.small(h)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decoding %s: %w", name, err)
	}
	return nil
}

func truncated(err error, entry string) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: entry %q is cut short", ErrBackupTruncated, entry)
	}
	return fmt.Errorf("reading %q: %w", entry, err)
}

func (a *archiveReader) read() (*BackupManifest, error) {
	h, err := a.next()
	if err == io.EOF {
		return nil, fmt.Errorf("%w: the file is empty", ErrNotBackup)
	}
	if err != nil || h.Name != backupManifestName {
		return nil, fmt.Errorf("%w: it does not start with %s", ErrNotBackup, backupManifestName)
	}
	data, err := a.small(h)
	if err != nil {
		return nil, err
	}
	m := &BackupManifest{}
	if err := json.Unmarshal(data, m); err != nil || m.Format != BackupFormat {
		return nil, fmt.Errorf("%w: its manifest is not of format %q", ErrNotBackup, BackupFormat)
	}
	if m.Version != BackupVersion {
		return nil, fmt.Errorf("the backup archive has version %d; this rezuscloud reads version %d", m.Version, BackupVersion)
	}
	seen := map[string]bool{}
	for _, s := range m.Streams {
		if !streamNameRE.MatchString(s) || seen[s] {
			return nil, fmt.Errorf("the manifest lists a bad or repeated stream name %q", s)
		}
		seen[s] = true
	}
	for _, k := range m.Keys {
		if !keyFileRE.MatchString(k) {
			return nil, fmt.Errorf("the manifest lists a bad key file name %q", k)
		}
	}
	if err := a.v.manifest(m); err != nil {
		return nil, err
	}
	for _, k := range m.Keys {
		h, err := a.expect("keys/" + k)
		if err != nil {
			return nil, err
		}
		data, err := a.small(h)
		if err != nil {
			return nil, err
		}
		if err := a.v.key(k, data); err != nil {
			return nil, err
		}
	}
	for _, name := range m.Streams {
		if err := a.stream(name); err != nil {
			return nil, fmt.Errorf("stream %s: %w", name, err)
		}
	}
	var end backupEnd
	if err := a.json(backupEndName, &end); err != nil {
		return nil, err
	}
	if end.Streams != len(m.Streams) {
		return nil, fmt.Errorf("the archive's end counts %d streams, its manifest %d", end.Streams, len(m.Streams))
	}
	if _, err := a.next(); err != io.EOF {
		if err == nil {
			err = fmt.Errorf("unexpected entry %q after %s", a.hdr.Name, backupEndName)
		}
		return nil, err
	}
	return m, nil
}

func (a *archiveReader) stream(name string) error {
	s := &BackupStream{}
	if err := a.json("streams/"+name+"/stream.json", s); err != nil {
		return err
	}
	if s.Name != name || len(s.Config) == 0 || len(s.State) == 0 {
		return fmt.Errorf("its stream.json is for %q or lacks a config or state", s.Name)
	}
	if err := a.v.streamStart(s); err != nil {
		return err
	}
	sum := sha256.New()
	var total int64
	parts := 0
	buf := make([]byte, 1<<20)
	prefix := "streams/" + name + "/part-"
	for {
		h, err := a.next()
		if err == io.EOF {
			return fmt.Errorf("%w: it ends inside the stream", ErrBackupTruncated)
		}
		if err != nil {
			return err
		}
		if !strings.HasPrefix(h.Name, prefix) {
			a.peeked = true
			break
		}
		parts++
		if h.Name != fmt.Sprintf("%s%06d", prefix, parts) || h.Size <= 0 || h.Size > backupPartSize {
			return fmt.Errorf("unexpected part %q of %d bytes", path.Base(h.Name), h.Size)
		}
		for left := h.Size; left > 0; {
			n, err := io.ReadFull(a.tr, buf[:min(left, int64(len(buf)))])
			if err != nil {
				return truncated(err, h.Name)
			}
			left -= int64(n)
			total += int64(n)
			sum.Write(buf[:n])
			if err := a.v.streamData(buf[:n]); err != nil {
				return err
			}
		}
	}
	var end backupStreamEnd
	if err := a.json("streams/"+name+"/end.json", &end); err != nil {
		return err
	}
	if end.Bytes != total || end.Parts != parts || end.SHA256 != hex.EncodeToString(sum.Sum(nil)) {
		return fmt.Errorf("its snapshot does not match its checksum (%d bytes in %d parts read, %d in %d recorded): the archive is corrupt", total, parts, end.Bytes, end.Parts)
	}
	return a.v.streamEnd(s)
}

// VerifyBackup reads a whole archive and checks its structure, sizes and
// checksums, without restoring anything.
func VerifyBackup(r io.Reader) (*BackupManifest, error) {
	return readArchive(r, nopVisitor{})
}

type nopVisitor struct{}

func (nopVisitor) manifest(*BackupManifest) error  { return nil }
func (nopVisitor) key(string, []byte) error        { return nil }
func (nopVisitor) streamStart(*BackupStream) error { return nil }
func (nopVisitor) streamData([]byte) error         { return nil }
func (nopVisitor) streamEnd(*BackupStream) error   { return nil }
