package webui

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkDashboard renders the dashboard with 100 tenants through the
// in-process API: what one page load and one live re-render cost.
func BenchmarkDashboard(b *testing.B) {
	s := newUIStack(b)
	for i := range 100 {
		s.createTenant(fmt.Sprintf("t%03d", i), map[string]string{"env": "dev"})
	}
	br := s.signIn("ada", "admin")
	b.ResetTimer()
	for b.Loop() {
		res := br.get("/ui/")
		require.Equal(b, http.StatusOK, res.Code)
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
