package leaktest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// A goroutine that stays is found; one that ends within the wait is not.
func TestFindGoroutines(t *testing.T) {
	base := []goleak.Option{goleak.IgnoreCurrent()}
	stop := make(chan struct{})
	go func() { <-stop }()
	require.Error(t, findGoroutines(base, 300*time.Millisecond), "a goroutine that stays")

	go func() { time.Sleep(time.Second); close(stop) }()
	require.NoError(t, findGoroutines(base, 5*time.Second), "both end within the wait")
}
