package eventstore_test

import (
	"bytes"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
)

// TestRouteSendsNothingBeforeVerifyingItsPeer: issue 27, finding 4. A fake
// peer listening on a down replica's route port captured the route
// credentials in the clear (CONNECT {"user":"rezuscloud-route","pass":…}).
// A node dialling its peer now starts TLS at once and never sends its
// CONNECT to a peer without the cluster's certificate.
func TestRouteSendsNothingBeforeVerifyingItsPeer(t *testing.T) {
	fake, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer fake.Close()
	secret := bytes.Repeat([]byte{42}, 32)
	startNode(t, t.TempDir(), routeListen, []string{fake.Addr().String()}, secret)

	conn, err := fake.Accept()
	require.NoError(t, err)
	defer conn.Close()
	// As a NATS server would: its INFO, saying it needs no TLS.
	_, err = conn.Write([]byte(`INFO {"server_id":"FAKE","server_name":"fake","version":"2.15.2","proto":1,"tls_required":false}` + "\r\n"))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	var got []byte
	buf := make([]byte, 4096)
	for len(got) < 5 {
		n, err := conn.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			break
		}
	}
	require.NotEmpty(t, got, "the node said nothing")
	require.Equal(t, byte(0x16), got[0], "a TLS handshake record first, not %q", got)
	pass, err := eventstore.RoutePassword(secret)
	require.NoError(t, err)
	require.NotContains(t, string(got), "CONNECT")
	require.NotContains(t, string(got), pass)
}

// TestRogueRouteIsRefused: a server with the leaked route credentials but
// without the cluster's certificate joined before, was gossiped to the other
// replicas and saw every event. Now its routes are refused and no node
// counts it as a peer.
func TestRogueRouteIsRefused(t *testing.T) {
	secret := bytes.Repeat([]byte{42}, 32)
	addrs, dirs, others := threeNodeLayout(t)
	a := startNode(t, dirs[0], addrs[0], others(0), secret)
	pass, err := eventstore.RoutePassword(secret)
	require.NoError(t, err)

	rogue, err := server.NewServer(&server.Options{ServerName: "rogue", Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true,
		Cluster: server.ClusterOpts{Name: "rz", Host: "127.0.0.1", Port: server.RANDOM_PORT, Username: eventstore.RouteUser, Password: pass},
		Routes:  []*url.URL{{Scheme: "nats", User: url.UserPassword(eventstore.RouteUser, pass), Host: addrs[0]}}})
	require.NoError(t, err)
	rogue.SetLoggerV2(quiet{}, false, false, false)
	go rogue.Start()
	defer rogue.Shutdown()
	require.True(t, rogue.ReadyForConnections(10*time.Second))

	require.Eventually(t, func() bool { return a.emb.ClusterStatus().RefusedRoutes > 0 }, 30*time.Second, 50*time.Millisecond,
		"the node saw the rogue's route and refused it")
	require.Zero(t, a.emb.ClusterStatus().Connected)
	rz, err := rogue.Routez(nil)
	require.NoError(t, err)
	require.Empty(t, rz.Routes, "the rogue has no route into the cluster")
}

// quiet is a nats-server logger that keeps nothing: the rogue's own errors
// are not what the test reads.
type quiet struct{}

func (quiet) Noticef(string, ...any) {}
func (quiet) Warnf(string, ...any)   {}
func (quiet) Fatalf(string, ...any)  {}
func (quiet) Errorf(string, ...any)  {}
func (quiet) Debugf(string, ...any)  {}
func (quiet) Tracef(string, ...any)  {}
