//go:build !e2e && !browser

package main

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"
)

// TestMetalNetworksFlag: --metal-networks is parsed at start (an error names
// the flag); without it loopback is refused unless --with-emulator runs
// nodes there, and this host's own addresses are refused either way.
func TestMetalNetworksFlag(t *testing.T) {
	cfg := parseServe(t, "--metal-networks", "10.20.0.0/16, 127.0.0.0/8")
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("127.0.0.0/8")}, cfg.MetalAddresses.Networks)
	require.NoError(t, cfg.MetalAddresses.CheckAddress("127.0.5.1"))
	require.Error(t, cfg.MetalAddresses.CheckAddress("10.0.0.1"))

	cfg = parseServe(t)
	require.Empty(t, cfg.MetalAddresses.Networks)
	require.ErrorContains(t, cfg.MetalAddresses.CheckAddress("127.0.5.1"), "loopback")
	require.ErrorContains(t, cfg.MetalAddresses.CheckAddress("169.254.169.254"), "link-local")
	for _, own := range cfg.MetalAddresses.Own {
		require.False(t, own.IsLoopback(), "loopback is the rule's, not an own address")
		require.ErrorContains(t, cfg.MetalAddresses.Check(own), "own address")
	}
	require.NoError(t, parseServe(t, "--with-emulator").MetalAddresses.CheckAddress("127.0.5.1"), "the emulator's nodes are on loopback")

	cmd := serveCommand()
	cmd.Action = func(c *cli.Context) error { _, err := serveConfigFrom(c); return err }
	app := &cli.App{Name: "rezuscloud", Commands: []*cli.Command{cmd}}
	require.ErrorContains(t, app.Run([]string{"rezuscloud", "serve", "--metal-networks", "rack-1"}), `--metal-networks: "rack-1" is neither`)
}
