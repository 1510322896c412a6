package webui

import (
	"context"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/rezuscloud/rezuscloud/talos"
)

// inPlace stands in for the nodes of the UI tests (their addresses answer
// nothing here; the e2e tests ask real emulated nodes): every config is
// taken without a reboot.
type inPlace struct{}

func (inPlace) ApplyConfigDryRun(context.Context, *secrets.Bundle, string, []byte) (talos.ApplyResult, error) {
	return talos.ApplyResult{Mode: machine.ApplyConfigurationRequest_NO_REBOOT}, nil
}
