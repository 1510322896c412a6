package webui

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// replicasPage lists the servers running on this data, from their
// heartbeats (GET /api/v1/replicas, admins only: it names the hosts).
func (u *UI) replicasPage(c echo.Context) error {
	l, err := getOf[domain.ReplicaList](u, c.Request(), "/replicas")
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, ReplicasPage(u, viewerOf(c), *l))
}

// replicaTenants is a replica's tenant count; a release before 0.2.0 does
// not say, which is not the same as none.
func replicaTenants(r domain.Replica) string {
	if r.Tenants == nil {
		return "unknown"
	}
	return strconv.Itoa(*r.Tenants)
}

// replicaRun names a replica's run, which changes at each start under the
// same holder.
func replicaRun(r domain.Replica) string {
	if r.ID == "" {
		return "a release before 0.2.0: no run ID"
	}
	return "run " + r.ID
}
