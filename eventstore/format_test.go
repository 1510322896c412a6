package eventstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

func TestCheckFormat(t *testing.T) {
	tests := []struct {
		name    string
		running string
		f       *eventstore.Format
		wantErr string
	}{
		{name: "no record: written before 0.2.0", running: "0.2.0"},
		{name: "same release", running: "0.2.0", f: &eventstore.Format{MinReader: "0.2.0", WrittenBy: "0.2.0"}},
		{name: "newer release", running: "0.3.1", f: &eventstore.Format{MinReader: "0.2.0", WrittenBy: "0.2.0"}},
		{name: "older writer, still readable", running: "0.2.0", f: &eventstore.Format{MinReader: "0.2.0", WrittenBy: "0.3.1"}},
		{name: "older than the lowest reader", running: "0.2.0", f: &eventstore.Format{MinReader: "0.3.0", WrittenBy: "0.3.1"},
			wantErr: "this data needs RezusCloud 0.3.0 or later (it was last written by 0.3.1); run that version, or restore a backup taken before the upgrade"},
		{name: "a prerelease is before its release", running: "0.3.0-rc.1", f: &eventstore.Format{MinReader: "0.3.0", WrittenBy: "0.3.0"},
			wantErr: "needs RezusCloud 0.3.0 or later"},
		{name: "major", running: "1.9.9", f: &eventstore.Format{MinReader: "9.0.0", WrittenBy: "9.0.0"}, wantErr: "needs RezusCloud 9.0.0 or later"},
		{name: "not a version", running: "dev", wantErr: `this build's version "dev" is not a semantic version`},
		{name: "record unreadable", running: "0.2.0", f: &eventstore.Format{MinReader: "soon"}, wantErr: `names minReader "soon"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := eventstore.CheckFormat(tt.running, tt.f)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
	var tooNew *eventstore.TooNewError
	require.ErrorAs(t, eventstore.CheckFormat("0.2.0", &eventstore.Format{MinReader: "0.3.0", WrittenBy: "0.3.1"}), &tooNew)
	assert.Equal(t, "0.2.0", tooNew.Running)
}

func TestNextFormat(t *testing.T) {
	tests := []struct {
		name               string
		running, minReader string
		f                  *eventstore.Format
		want               eventstore.Format
	}{
		{name: "first start", running: "0.2.0", minReader: "0.2.0", want: eventstore.Format{MinReader: "0.2.0", WrittenBy: "0.2.0"}},
		{name: "raises", running: "0.3.0", minReader: "0.3.0", f: &eventstore.Format{MinReader: "0.2.0", WrittenBy: "0.2.0"},
			want: eventstore.Format{MinReader: "0.3.0", WrittenBy: "0.3.0"}},
		{name: "never lowers", running: "0.2.0", minReader: "0.2.0", f: &eventstore.Format{MinReader: "0.2.0", WrittenBy: "0.3.1"},
			want: eventstore.Format{MinReader: "0.2.0", WrittenBy: "0.2.0"}},
		{name: "a newer release that writes nothing new", running: "0.3.1", minReader: "0.2.0", f: &eventstore.Format{MinReader: "0.3.0", WrittenBy: "0.3.0"},
			want: eventstore.Format{MinReader: "0.3.0", WrittenBy: "0.3.1"}},
		{name: "canonical", running: "v0.2.0", minReader: "v0.2.0", want: eventstore.Format{MinReader: "0.2.0", WrittenBy: "0.2.0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, eventstore.NextFormat(tt.running, tt.minReader, tt.f))
		})
	}
}

// TestFormatRecordOpen: on real NATS, a release records itself, a later
// one raises the lowest reader, an older one is refused without writing,
// and replicas opening at once leave the highest lowest reader.
func TestFormatRecordOpen(t *testing.T) {
	env := eventstoretest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec, err := eventstore.OpenFormat(ctx, env.Store)
	require.NoError(t, err)

	f, rev, err := rec.Get(ctx)
	require.NoError(t, err)
	assert.Nil(t, f, "fresh data has no record")
	assert.Zero(t, rev)

	got, err := rec.Open(ctx, "0.2.0", "0.2.0")
	require.NoError(t, err)
	assert.Equal(t, eventstore.Format{MinReader: "0.2.0", WrittenBy: "0.2.0"}, got)
	_, rev, err = rec.Get(ctx)
	require.NoError(t, err)
	_, err = rec.Open(ctx, "0.2.0", "0.2.0")
	require.NoError(t, err)
	_, again, err := rec.Get(ctx)
	require.NoError(t, err)
	assert.Equal(t, rev, again, "an unchanged record is not written again")

	_, err = rec.Open(ctx, "0.3.1", "0.3.0")
	require.NoError(t, err)
	_, err = rec.Open(ctx, "0.2.0", "0.2.0")
	require.EqualError(t, err, "this data needs RezusCloud 0.3.0 or later (it was last written by 0.3.1); run that version, or restore a backup taken before the upgrade")
	f, _, err = rec.Get(ctx)
	require.NoError(t, err)
	assert.Equal(t, &eventstore.Format{MinReader: "0.3.0", WrittenBy: "0.3.1"}, f, "a refused release writes nothing")

	var wg sync.WaitGroup
	for _, lowest := range []string{"0.3.0", "0.5.0", "0.4.0", "0.2.0"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := rec.Open(ctx, "0.5.0", lowest)
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	f, _, err = rec.Get(ctx)
	require.NoError(t, err)
	assert.Equal(t, "0.5.0", f.MinReader, "the lowest reader only rises, whoever writes last")
}
