package eventstore

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// A sealed stream is content too large to hold in memory (an etcd snapshot)
// sealed as it streams, with the STREAM construction of Hoang, Reyhanitabar,
// Rogaway and Vizár ("Online authenticated-encryption and its nonce-reuse
// misuse-resistance", 2015), the one age and Tink's streaming AEAD use:
//
//	streamMagic                      "rezus-sealed-stream/v1\n" (23 bytes)
//	salt                             32 random bytes
//	chunk 0 … chunk n                AES-256-GCM of 64 KiB of content each (the
//	                                 last one 0 to 64 KiB), with its 16-byte tag
//
// Each stream has its own key, HKDF-SHA256(key, salt, info = streamInfo ||
// context), so a stream opens only with the key and context it was sealed
// with (a stream copied under another object name does not open). Chunk i
// is sealed with the 12-byte nonce 0x00{7} || i (4 bytes, big-endian) ||
// last (1 byte: 1 on the final chunk, else 0). So a chunk altered, moved to
// another place, or a stream cut short (even at a chunk boundary: its last
// chunk then was not sealed as the last) fails to open, and the reader says
// which. Memory is one chunk whatever the length.
const (
	streamMagic     = "rezus-sealed-stream/v1\n"
	streamSaltSize  = 32
	streamChunkSize = 64 << 10
	streamInfo      = "rezuscloud sealed stream v1\x00"
)

// ErrSealedStreamDamaged says a sealed stream does not open: it was altered,
// reordered, truncated or sealed with another key or for another object.
var ErrSealedStreamDamaged = errors.New("sealed stream damaged")

// SealedStreamOverhead is how much longer the sealed form of n bytes is.
func SealedStreamOverhead(n int64) int64 {
	chunks := max(1, (n+streamChunkSize-1)/streamChunkSize)
	return int64(len(streamMagic)+streamSaltSize) + chunks*16
}

func streamAEAD(key, salt []byte, context string) (cipher.AEAD, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("a sealed stream needs a 32-byte key, got %d bytes", len(key))
	}
	sub, err := hkdf.Key(sha256.New, key, salt, streamInfo+context, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(sub)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func streamNonce(n *[12]byte, i uint32, last bool) []byte {
	*n = [12]byte{}
	binary.BigEndian.PutUint32(n[7:11], i)
	if last {
		n[11] = 1
	}
	return n[:]
}

// SealStream returns a reader of the sealed form of plain, sealed with key
// (32 bytes) for context (what the content is, e.g. its object name: the
// stream opens only for the same context). Read errors of plain, io.EOF
// aside, are passed on.
func SealStream(key []byte, context string, plain io.Reader) (io.Reader, error) {
	salt, err := random(streamSaltSize)
	if err != nil {
		return nil, err
	}
	aead, err := streamAEAD(key, salt, context)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, streamChunkSize+aead.Overhead())
	out = append(append(out, streamMagic...), salt...)
	return &sealReader{src: bufio.NewReaderSize(plain, streamChunkSize), aead: aead,
		plain: make([]byte, streamChunkSize), out: out}, nil
}

type sealReader struct {
	src   *bufio.Reader
	aead  cipher.AEAD
	plain []byte
	out   []byte // sealed bytes not handed out yet
	off   int
	i     uint32
	done  bool
	err   error
	nonce [12]byte
}

func (s *sealReader) Read(p []byte) (int, error) {
	for s.off == len(s.out) {
		if s.err != nil {
			return 0, s.err
		}
		if s.done {
			return 0, io.EOF
		}
		s.err = s.fill()
	}
	n := copy(p, s.out[s.off:])
	s.off += n
	return n, nil
}

func (s *sealReader) fill() error {
	k, err := io.ReadFull(s.src, s.plain)
	last := false
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		last = true
	case err != nil:
		return err
	default:
		if _, perr := s.src.Peek(1); errors.Is(perr, io.EOF) {
			last = true
		} else if perr != nil {
			return perr
		}
	}
	if s.i == math.MaxUint32 && !last {
		return errors.New("sealed stream too long")
	}
	s.out = s.aead.Seal(s.out[:0], streamNonce(&s.nonce, s.i, last), s.plain[:k], nil)
	s.off = 0
	s.i++
	s.done = last
	return nil
}

// OpenStream returns a reader of the content of the sealed stream read from
// sealed, which must have been sealed with key for context. It hands out a
// chunk only once the chunk is authenticated; an altered, reordered or cut
// short stream fails with an error wrapping ErrSealedStreamDamaged that
// says at which chunk and why. Read errors of sealed are passed on.
func OpenStream(key []byte, context string, sealed io.Reader) io.Reader {
	return &openReader{key: key, context: context, src: bufio.NewReaderSize(sealed, streamChunkSize+17)}
}

type openReader struct {
	key     []byte
	context string
	src     *bufio.Reader
	aead    cipher.AEAD
	buf     []byte // one sealed chunk
	plain   []byte // its content
	out     []byte
	off     int
	i       uint32
	done    bool
	err     error
	nonce   [12]byte
}

func (o *openReader) Read(p []byte) (int, error) {
	for o.off == len(o.out) {
		if o.err != nil {
			return 0, o.err
		}
		if o.done {
			return 0, io.EOF
		}
		o.err = o.fill()
	}
	n := copy(p, o.out[o.off:])
	o.off += n
	return n, nil
}

func damaged(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrSealedStreamDamaged, fmt.Sprintf(format, args...))
}

func (o *openReader) header() error {
	head := make([]byte, len(streamMagic)+streamSaltSize)
	if _, err := io.ReadFull(o.src, head); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return damaged("it ends within its header")
		}
		return err
	}
	if string(head[:len(streamMagic)]) != streamMagic {
		return damaged("it does not start with %q: not a sealed stream", streamMagic[:len(streamMagic)-1])
	}
	aead, err := streamAEAD(o.key, head[len(streamMagic):], o.context)
	if err != nil {
		return err
	}
	o.aead = aead
	o.buf = make([]byte, streamChunkSize+aead.Overhead())
	o.plain = make([]byte, 0, streamChunkSize)
	return nil
}

func (o *openReader) fill() error {
	if o.aead == nil {
		if err := o.header(); err != nil {
			return err
		}
	}
	k, err := io.ReadFull(o.src, o.buf)
	last := false
	switch {
	case errors.Is(err, io.EOF):
		return damaged("truncated: it ends after chunk %d without its final chunk", int64(o.i)-1)
	case errors.Is(err, io.ErrUnexpectedEOF):
		last = true
	case err != nil:
		return err
	default:
		if _, perr := o.src.Peek(1); errors.Is(perr, io.EOF) {
			last = true
		} else if perr != nil {
			return perr
		}
	}
	if k < o.aead.Overhead() {
		return damaged("chunk %d is %d bytes, shorter than its tag", o.i, k)
	}
	plain, err := o.aead.Open(o.plain[:0], streamNonce(&o.nonce, o.i, last), o.buf[:k], nil)
	if err != nil {
		if last {
			if _, err2 := o.aead.Open(o.plain[:0], streamNonce(&o.nonce, o.i, false), o.buf[:k], nil); err2 == nil {
				return damaged("truncated: chunk %d was not sealed as the final one", o.i)
			}
		}
		return damaged("chunk %d fails authentication: altered, reordered, or sealed with another key or for another object", o.i)
	}
	if !last && o.i == math.MaxUint32 {
		return damaged("too many chunks")
	}
	o.out, o.off = plain, 0
	o.i++
	o.done = last
	return nil
}
