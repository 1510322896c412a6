package talos

import (
	"context"
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
)

// Ready asks a configured node over mTLS whether it is up: problem is what
// keeps it from being ready ("" when every service runs and is healthy, as
// its v1alpha1.Service resources say), err that it did not answer (down,
// rebooting, unreachable).
func (a NodeAPI) Ready(ctx context.Context, b *secrets.Bundle, address string) (problem string, err error) {
	err = a.call(ctx, b, address, func(ctx context.Context, c *client.Client) error {
		svcs, err := NodeServices(ctx, c)
		if err != nil {
			return fmt.Errorf("%s: %w", address, err)
		}
		problem = ServicesProblem(svcs)
		return nil
	})
	return problem, err
}
