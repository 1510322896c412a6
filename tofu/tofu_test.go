package tofu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
)

// syncBuffer is a tofu output that tests read while tofu writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestRunTofuInterruptsThenKills runs a stand-in for tofu (a shell script)
// and ends its context: tofu gets SIGINT first, so it can release its state
// lock, and is killed when it does not stop within the grace.
func TestRunTofuInterruptsThenKills(t *testing.T) {
	tests := []struct {
		name   string
		script string
		grace  time.Duration
		output string
		// fenced ends the run as a replica that lost its tenant does.
		fenced bool
	}{
		{"stops on SIGINT", "trap 'echo interrupted; exit 130' INT", time.Minute, "interrupted", false},
		{"killed after the grace", "trap '' INT", 200 * time.Millisecond, "", false},
		{"killed at once when fenced", "trap 'echo interrupted; exit 130' INT", time.Minute, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "tofu")
			require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\n"+tc.script+"\necho started\nwhile :; do sleep 0.05; done\n"), 0o755))
			work := t.TempDir()
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			var out syncBuffer
			done := make(chan error, 1)
			go func() {
				done <- Binary{Bin: bin, Grace: tc.grace}.RunTofu(ctx, work, []string{"PATH=/usr/bin:/bin"}, &out, "apply")
			}()
			require.Eventually(t, func() bool { return strings.Contains(out.String(), "started") }, 10*time.Second, 10*time.Millisecond)
			stop := errors.New("stopped by the test")
			if tc.fenced {
				stop = fmt.Errorf("%w: the tenant moved", eventstore.ErrFenced)
			}
			cancel(stop)
			stopped := time.Now()
			select {
			case err := <-done:
				if tc.output == "" && !tc.fenced {
					require.GreaterOrEqual(t, time.Since(stopped), tc.grace, "killed only after the grace")
				}
				require.ErrorIs(t, err, stop, "the error says why tofu was stopped")
				require.ErrorContains(t, err, "tofu apply: ")
			case <-time.After(20 * time.Second):
				t.Fatal("tofu was not stopped")
			}
			require.Contains(t, out.String(), tc.output)
			if tc.fenced {
				require.NotContains(t, out.String(), "interrupted", "a fenced tofu is killed, not interrupted")
			}
			_, err := os.Stat(filepath.Join(work, groupFile))
			require.True(t, os.IsNotExist(err), "the process group record goes with tofu")
		})
	}
}

func TestRunTofuReportsItsExit(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tofu")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\necho \"$@\" in \"$PWD\" with $FOO\nexit 3\n"), 0o755))
	work := t.TempDir()
	var out syncBuffer
	err := Binary{Bin: bin}.RunTofu(context.Background(), work, []string{"FOO=bar"}, &out, "init", "-input=false")
	require.ErrorContains(t, err, "tofu init: exit status 3")
	require.Equal(t, "init -input=false in "+work+" with bar\n", out.String())
}
