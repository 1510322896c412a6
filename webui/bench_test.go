package webui

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// BenchmarkDashboard renders the dashboard with 100 tenants through the
// in-process API: what one page load and one live re-render cost.
// BenchmarkDashboard renders the dashboard (the fleet summary, recent
// applies and upgrades, audit) over 100 and 1,000 tenants with an apply
// each: what each live re-render of the page costs at fleet size.
func BenchmarkDashboard(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("tenants=%d", n), func(b *testing.B) {
			s := newUIStack(b)
			for i := range n {
				name := fmt.Sprintf("t%04d", i)
				s.createTenant(name, map[string]string{"env": "dev"})
				s.record(domain.ApplyKind, name, "apply-1", domain.ApplySpec{Operation: "apply", Trigger: "change", Generation: 1},
					domain.ApplyStatus{Phase: domain.ApplySucceeded})
			}
			br := s.signIn("ada", "admin")
			b.ResetTimer()
			for b.Loop() {
				res := br.get("/ui/")
				require.Equal(b, http.StatusOK, res.Code)
			}
		})
	}
}

// BenchmarkTenantList renders the filtered tenant rows (an htmx partial).
func BenchmarkTenantList(b *testing.B) {
	s := newUIStack(b)
	for i := range 100 {
		env := "dev"
		if i%2 == 0 {
			env = "prod"
		}
		s.createTenant(fmt.Sprintf("t%03d", i), map[string]string{"env": env})
	}
	br := s.signIn("ada", "admin")
	b.ResetTimer()
	for b.Loop() {
		res := br.hxGetTarget("/ui/tenants?labelSelector=env%3Dprod", "tenant-rows")
		require.Equal(b, http.StatusOK, res.Code)
	}
}
