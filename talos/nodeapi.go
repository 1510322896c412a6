package talos

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// APIPort is the Talos API (apid) port.
const APIPort = "50000"

// NodeState is what a node says about itself over the Talos API.
type NodeState struct {
	// Maintenance is true when the node answers only without a client
	// certificate: it booted Talos and waits for a config.
	Maintenance bool
	// Version is the Talos version it runs (configured nodes).
	Version string
}

// NodeAPI drives single Talos nodes through the real Talos API: as a tenant
// (mTLS with a client certificate from the tenant's PKI) or, for a node in
// maintenance mode, without one.
type NodeAPI struct {
	// Timeout bounds each call; default 10s.
	Timeout time.Duration
	// Addresses, when set, is checked against every address dialled, after
	// name resolution (AddressPolicy.Control): the metal path's, whose
	// addresses tenant editors write. Nil dials any.
	Addresses *AddressPolicy
}

// dialOptions are the client options every call's connection is made with.
func (a NodeAPI) dialOptions() []client.OptionFunc {
	if a.Addresses == nil {
		return nil
	}
	d := &net.Dialer{Control: a.Addresses.Control}
	return []client.OptionFunc{client.WithGRPCDialOptions(grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	}))}
}

func (a NodeAPI) timeout() time.Duration {
	if a.Timeout == 0 {
		return 10 * time.Second
	}
	return a.Timeout
}

// endpoint is host:port of a node's Talos API; address is a host or host:port.
func endpoint(address string) string {
	if _, _, err := net.SplitHostPort(address); err == nil {
		return address
	}
	return net.JoinHostPort(address, APIPort)
}

func (a NodeAPI) secure(ctx context.Context, b *secrets.Bundle, address string) (*client.Client, error) {
	raw, err := Talosconfig(b, "node", []string{endpoint(address)})
	if err != nil {
		return nil, err
	}
	tc, err := clientconfig.FromBytes(raw)
	if err != nil {
		return nil, err
	}
	return client.New(ctx, append(a.dialOptions(), client.WithConfig(tc), client.WithEndpoints(endpoint(address)))...)
}

func (a NodeAPI) insecure(ctx context.Context, address string) (*client.Client, error) {
	return client.New(ctx, append(a.dialOptions(), client.WithEndpoints(endpoint(address)),
		client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}))...) //nolint:gosec // maintenance mode has no PKI yet: Talos' own insecure path.
}

// Probe finds out whether a node runs a config of this tenant (answers over
// mTLS) or waits in maintenance mode.
func (a NodeAPI) Probe(ctx context.Context, b *secrets.Bundle, address string) (NodeState, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout())
	defer cancel()
	c, err := a.secure(ctx, b, address)
	if err != nil {
		return NodeState{}, err
	}
	v, serr := NodeVersion(ctx, c)
	c.Close()
	if serr == nil {
		return NodeState{Version: v}, nil
	}
	ic, err := a.insecure(ctx, address)
	if err != nil {
		return NodeState{}, err
	}
	defer ic.Close()
	// In maintenance mode the only open calls are Version and
	// ApplyConfiguration (COSI answers only what the maintenance service
	// allows): the Version call is what tells maintenance mode.
	if _, err := ic.Version(ctx); err == nil {
		return NodeState{Maintenance: true}, nil
	}
	return NodeState{}, fmt.Errorf("node %s does not answer over mTLS with this tenant's PKI (%v) nor in maintenance mode", address, serr)
}

// ApplyResult is how a node took a config.
type ApplyResult struct {
	// Mode is the mode Talos applied it with (REBOOT, NO_REBOOT, STAGED, TRY):
	// for AUTO, the one it chose.
	Mode machine.ApplyConfigurationRequest_Mode
	// Details is Talos's explanation (mode details), one line per node answering.
	Details string
}

// Reboot reports whether the node reboots to take the config.
func (r ApplyResult) Reboot() bool { return r.Mode == machine.ApplyConfigurationRequest_REBOOT }

// ApplyConfig applies a machine config: without a client certificate to a
// node in maintenance mode (it installs and reboots), else over mTLS in
// place, rebooting only when Talos needs to (mode AUTO); the result says
// which Talos chose.
func (a NodeAPI) ApplyConfig(ctx context.Context, b *secrets.Bundle, address string, cfg []byte, maintenance bool) (ApplyResult, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout())
	defer cancel()
	var c *client.Client
	var err error
	mode := machine.ApplyConfigurationRequest_AUTO
	if maintenance {
		c, err = a.insecure(ctx, address)
		mode = machine.ApplyConfigurationRequest_REBOOT
	} else {
		c, err = a.secure(ctx, b, address)
	}
	if err != nil {
		return ApplyResult{}, err
	}
	defer c.Close()
	resp, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: cfg, Mode: mode})
	if err != nil {
		return ApplyResult{}, fmt.Errorf("applying the config to %s: %w", address, err)
	}
	res := ApplyResult{Mode: mode}
	var details []string
	for i, m := range resp.GetMessages() {
		if i == 0 || m.GetMode() == machine.ApplyConfigurationRequest_REBOOT {
			res.Mode = m.GetMode()
		}
		details = append(details, m.GetModeDetails())
	}
	res.Details = strings.Join(details, "; ")
	return res, nil
}

// ApplyConfigDryRun asks a running node (over mTLS) how it would take a
// config in mode AUTO without applying it: the result's Reboot says
// whether it would reboot.
func (a NodeAPI) ApplyConfigDryRun(ctx context.Context, b *secrets.Bundle, address string, cfg []byte) (ApplyResult, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout())
	defer cancel()
	c, err := a.secure(ctx, b, address)
	if err != nil {
		return ApplyResult{}, err
	}
	defer c.Close()
	resp, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: cfg, Mode: machine.ApplyConfigurationRequest_AUTO, DryRun: true})
	if err != nil {
		return ApplyResult{}, fmt.Errorf("dry run of the config on %s: %w", address, err)
	}
	res := ApplyResult{Mode: machine.ApplyConfigurationRequest_AUTO}
	var details []string
	for i, m := range resp.GetMessages() {
		if i == 0 || m.GetMode() == machine.ApplyConfigurationRequest_REBOOT {
			res.Mode = m.GetMode()
		}
		details = append(details, m.GetModeDetails())
	}
	res.Details = strings.Join(details, "; ")
	return res, nil
}

// Bootstrap starts etcd on a control-plane node. A cluster bootstrapped before
// is not an error: bootstrapping is done once, whoever did it.
func (a NodeAPI) Bootstrap(ctx context.Context, b *secrets.Bundle, address string) error {
	return a.call(ctx, b, address, func(ctx context.Context, c *client.Client) error {
		err := c.Bootstrap(ctx, &machine.BootstrapRequest{})
		if s, ok := status.FromError(err); ok && s.Code() == codes.AlreadyExists {
			return nil
		}
		return err
	})
}

// Reset wipes a node (it leaves etcd gracefully) and reboots it into maintenance mode.
func (a NodeAPI) Reset(ctx context.Context, b *secrets.Bundle, address string) error {
	return a.call(ctx, b, address, func(ctx context.Context, c *client.Client) error {
		return c.Reset(ctx, true, true)
	})
}

// call runs f with a client to the node at address over mTLS, bounded by the
// call timeout, and closes the client after.
func (a NodeAPI) call(ctx context.Context, b *secrets.Bundle, address string, f func(context.Context, *client.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, a.timeout())
	defer cancel()
	c, err := a.secure(ctx, b, address)
	if err != nil {
		return err
	}
	defer c.Close()
	return f(ctx, c)
}
