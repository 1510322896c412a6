package talos

import (
	"context"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
)

// BundleSource gives a tenant's secrets bundle; *PKI is the one used.
type BundleSource interface {
	Bundle(ctx context.Context, tenant string) (*secrets.Bundle, error)
}
