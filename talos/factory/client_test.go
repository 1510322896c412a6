package factory

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator"
)

// TestRegisterWithTheEmulatorsFactory registers schematics with the
// emulator's stand-in for the Image Factory (its POST /schematics, the
// factory's format), once each, and refuses a factory whose IDs differ.
func TestRegisterWithTheEmulatorsFactory(t *testing.T) {
	em, err := emulator.New(emulator.Config{})
	require.NoError(t, err)
	var posts atomic.Int32
	h := em.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c := New(srv.URL+"/", nil)
	ctx := context.Background()
	s := &domain.Schematic{Extensions: []string{"siderolabs/iscsi-tools", "siderolabs/util-linux-tools"}, ExtraKernelArgs: []string{"console=ttyS0"}}
	require.NoError(t, c.Register(ctx, s))
	require.NoError(t, c.Register(ctx, s))
	require.Equal(t, int32(1), posts.Load(), "a confirmed schematic is posted once")

	bad := &domain.Schematic{Extensions: []string{"Not A Name"}}
	err = c.Register(ctx, bad)
	require.ErrorContains(t, err, "422")

	liar := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":"` + domain.VanillaSchematic + `"}`)) //nolint:errcheck
	}))
	t.Cleanup(liar.Close)
	require.ErrorContains(t, New(liar.URL, nil).Register(ctx, s), "not the one RezusCloud hashes")
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	require.Error(t, New(down.URL, nil).Register(ctx, s))
}
