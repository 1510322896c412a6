package apply

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/talos"
)

// TestPlanErrorIsRedacted: issue 42, finding 4. A dry run's planError (what
// "Show impact" and `rezusctl diff` show the tenant's editors) was tofu's
// first error diagnostic as it came, not redacted at all: a module that
// spelled a file it read in a regular expression's error, on an instance
// keyed by it, had the editors read it. Now it is tofu's own words only.
func TestPlanErrorIsRedacted(t *testing.T) {
	e := newRunEnv(t)
	e.createTenant("acme")
	e.waitApplies("acme", domain.ApplySucceeded)

	e.tofu.set(func(f *fakeTofu) {
		f.planDiagnostic = `{"@level":"error","@message":"Error: Invalid function argument","type":"diagnostic","diagnostic":{"severity":"error",` +
			`"summary":"Invalid function argument","detail":"Invalid value for \"pattern\" parameter: invalid regexp pattern: missing closing ) in ( U0VD UkVU LVNF QUwt S0VZ.",` +
			`"address":"emulated_machine.cp[\"U0VDUkVULVNFQUwtS0VZ\"]"}}`
	})
	_, err := e.worker.PlanChange(e.ctx, "acme", talos.Change{})
	require.Error(t, err)
	for _, w := range []string{"U0VD", "UkVU", "LVNF", "QUwt", "S0VZ"} {
		require.NotContains(t, err.Error(), w)
	}
	require.Equal(t, `tofu plan: emulated_machine.cp["(redacted)"]: Invalid function argument: (redacted)`, err.Error())
}
