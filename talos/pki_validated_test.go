package talos

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDecodeValidatesNewJSONOnly: a tenant's bundle is validated when its
// stored JSON is new to the replica, not again for the same JSON (the
// RSA-4096 key's check is most of a decode); a changed bundle that does
// not validate is refused, and each caller gets a bundle of its own.
func TestDecodeValidatesNewJSONOnly(t *testing.T) {
	p := NewPKI(PKIConfig{})
	b, err := NewBundle("v1.13.0", time.Now())
	require.NoError(t, err)
	raw, err := json.Marshal(b)
	require.NoError(t, err)

	first, err := p.decode("acme", raw)
	require.NoError(t, err)
	second, err := p.decode("acme", raw)
	require.NoError(t, err)
	require.Equal(t, first.Certs.OS.Crt, second.Certs.OS.Crt)
	require.NotSame(t, first.Certs, second.Certs, "each caller decodes its own")

	b.TrustdInfo.Token = ""
	broken, err := json.Marshal(b)
	require.NoError(t, err)
	_, err = p.decode("acme", broken)
	require.ErrorContains(t, err, "trustdinfo.token is required")
	_, err = p.decode("acme", raw)
	require.NoError(t, err)

	p.forgetDecoded("acme")
	require.Empty(t, p.validated)
}

// BenchmarkDecodeBundle: a tenant's stored bundle decoded for the first
// time (validated) and again (the same JSON).
func BenchmarkDecodeBundle(b *testing.B) {
	bundle, err := NewBundle("v1.13.0", time.Now())
	require.NoError(b, err)
	raw, err := json.Marshal(bundle)
	require.NoError(b, err)
	b.Run("new", func(b *testing.B) {
		for b.Loop() {
			p := NewPKI(PKIConfig{})
			if _, err := p.decode("acme", raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("again", func(b *testing.B) {
		p := NewPKI(PKIConfig{})
		for b.Loop() {
			if _, err := p.decode("acme", raw); err != nil {
				b.Fatal(err)
			}
		}
	})
}
