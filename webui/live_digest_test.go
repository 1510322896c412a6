package webui

import (
	"bytes"
	"hash/fnv"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// fragmentDigest digests what the browser receives as the event's data (the
// lines writeEvent frames, joined with "\n"): static/live.js digests that
// data when it reopens a stream with ?seen=, so both must agree.
func TestFragmentDigestIsOfTheEventData(t *testing.T) {
	fnv64 := func(s string) string {
		h := fnv.New64a()
		h.Write([]byte(s))
		return strconv.FormatUint(h.Sum64(), 36)
	}
	for _, html := range []string{"", "<p>one</p>", "<p>\n\ttwo</p>\n", "a\r\nb", "a\n\nb\n"} {
		var framed bytes.Buffer
		writeEvent(&framed, "x", html)
		var data []string
		for _, line := range bytes.Split(bytes.TrimSuffix(framed.Bytes(), []byte("\n\n")), []byte("\n"))[1:] {
			data = append(data, string(bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))))
		}
		joined := ""
		for i, d := range data {
			if i > 0 {
				joined += "\n"
			}
			joined += d
		}
		require.Equal(t, fnv64(joined), fragmentDigest([]byte(html)), "%q", html)
	}
}
