package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// describeTenantCertificates is describe's section of a tenant's CAs (and
// those accepted during a rotation): each one's end, absolute and as time
// left by the reader's clock, marked when it falls within the window of the
// CertificatesExpiring condition.
func describeTenantCertificates(w io.Writer, o *domain.Object, now time.Time) {
	fmt.Fprintln(w, "Certificates:")
	var st domain.TenantStatus
	if json.Unmarshal(o.Status, &st) != nil || len(st.Certificates) == 0 {
		fmt.Fprintln(w, "  <none> (listed once the tenant's secrets bundle exists)")
		return
	}
	rows := [][]string{{"NAME", "NOT AFTER", "ENDS"}}
	for _, c := range st.Certificates {
		ends := "in " + humanDuration(c.NotAfter.Sub(now))
		switch {
		case !c.NotAfter.After(now):
			ends = "ended " + humanDuration(now.Sub(c.NotAfter)) + " ago"
		case !c.NotAfter.After(now.Add(domain.CertificateWarningWindow)):
			ends += fmt.Sprintf(" (within %d days: rotate it)", int(domain.CertificateWarningWindow/(24*time.Hour)))
		}
		rows = append(rows, []string{c.Label(), c.NotAfter.UTC().Format(time.RFC3339), ends})
	}
	indentTable(w, rows)
}
