package talos

import (
	"context"
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
)

// Ready asks a configured node over mTLS whether it is up: problem is what
// keeps it from being ready ("" when every service runs and is healthy),
// err that it did not answer (down, rebooting, unreachable).
func (a NodeAPI) Ready(ctx context.Context, b *secrets.Bundle, address string) (problem string, err error) {
	err = a.call(ctx, b, address, func(ctx context.Context, c *client.Client) error {
		resp, err := c.ServiceList(ctx)
		if err != nil {
			return fmt.Errorf("listing the services of %s: %w", address, err)
		}
		var bad []string
		for _, msg := range resp.GetMessages() {
			for _, s := range msg.GetServices() {
				if s.GetState() != "Running" || !s.GetHealth().GetHealthy() {
					bad = append(bad, s.GetId()+" ("+s.GetState()+")")
				}
			}
		}
		if len(bad) > 0 {
			problem = "services not healthy: " + strings.Join(bad, ", ")
		}
		return nil
	})
	return problem, err
}
