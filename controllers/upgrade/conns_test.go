package upgrade_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/rezuscloud/rezuscloud/controllers/upgrade"
	"github.com/rezuscloud/rezuscloud/domain"
)

// nodeTraffic counts, by node address, the connections the saga opens and
// the Talos calls it makes, and the calls that failed.
type nodeTraffic struct {
	mu                   sync.Mutex
	dials, calls, failed map[string]int
}

func (n *nodeTraffic) add(m map[string]int, host string) {
	n.mu.Lock()
	m[host]++
	n.mu.Unlock()
}

func (n *nodeTraffic) options() []grpc.DialOption {
	var d net.Dialer
	return []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(addr)
			n.add(n.dials, host)
			return d.DialContext(ctx, "tcp", addr)
		}),
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			host, _, _ := net.SplitHostPort(strings.TrimPrefix(cc.Target(), "dns:///"))
			err := invoker(ctx, method, req, reply, cc, opts...)
			n.add(n.calls, host)
			if err != nil {
				n.add(n.failed, host)
			}
			return err
		}),
	}
}

// TestUpgradeSagaKeepsAConnectionANode: a run keeps its connection to a
// node between calls instead of a TLS handshake a call (issue 49: a fleet
// rollout's polls of 100 tenants' nodes at once), and drops it at a
// failure, so a node that rebooted is dialed afresh and the run goes on.
// A node's connections are fewer than its calls that got through (before,
// each call dialed one).
func TestUpgradeSagaKeepsAConnectionANode(t *testing.T) {
	e := newSagaEnv(t, 1, 2, fastNodes)
	tr := &nodeTraffic{dials: map[string]int{}, calls: map[string]int{}, failed: map[string]int{}}
	// Polls 50 ms apart: a reboot of 40 ms fails a call or two, not ten.
	e.startSaga(func(c *upgrade.Config) {
		c.DialOptions, c.PollInterval = append(c.DialOptions, tr.options()...), 50*time.Millisecond
	})
	e.createUpgrade("to-113", `{"talosVersion":"`+sagaTo+`"}`)
	u := e.waitUpgrade("to-113", "finished", finished)
	require.Equal(t, domain.UpgradeSucceeded, u.Status.Phase, "reason: %s", u.Status.Reason)

	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, n := range e.nodes {
		ip := e.ips[n]
		t.Logf("%s: %d calls (%d failed), %d connections", n, tr.calls[ip], tr.failed[ip], tr.dials[ip])
		ok := tr.calls[ip] - tr.failed[ip]
		require.Greater(t, ok, 3, "%s: calls that got through", n)
		require.Less(t, tr.dials[ip], ok, "%s: connections are kept for more than one call (a call each dialed one)", n)
	}
}
