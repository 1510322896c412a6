package domain

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ConditionCertificatesExpiring is True while one of a tenant's CAs (or a
// long-lived certificate RezusCloud records) ends within
// CertificateWarningWindow, or has ended; its message names each and its end.
const ConditionCertificatesExpiring = "CertificatesExpiring"

// Reasons of ConditionCertificatesExpiring.
const (
	ReasonCertificatesValid    = "Valid"
	ReasonCertificatesExpiring = "Expiring"
	ReasonCertificatesExpired  = "Expired"
)

// CertificateWarningWindow is how long before its end a certificate makes
// ConditionCertificatesExpiring True (and, in the metrics' alert, fires):
// long enough to plan and run a rotation in a maintenance window.
const CertificateWarningWindow = 90 * 24 * time.Hour

// CertificateUrgentWindow is how long before its end the fleet dashboard
// counts a certificate's tenant as needing a rotation now.
const CertificateUrgentWindow = 30 * 24 * time.Hour

// MaxTenantCertificates bounds status.certificates: four issuing CAs and,
// during a rotation, the accepted ones beside them.
const MaxTenantCertificates = 16

// CertificateExpiry is one CA or long-lived certificate of a tenant and
// when it ends.
type CertificateExpiry struct {
	// Name says which: a secret of spec.rotate (talos-ca, kubernetes-ca,
	// aggregator-ca) or etcd-ca.
	Name string `json:"name"`
	// Accepted marks a CA the machines still accept (or already accept)
	// during a rotation without issuing from it.
	Accepted bool `json:"accepted,omitempty"`
	// NotAfter is the certificate's end.
	NotAfter time.Time `json:"notAfter"`
}

// Label is the certificate's name, marked when it is only accepted.
func (c CertificateExpiry) Label() string {
	if c.Accepted {
		return c.Name + " (accepted)"
	}
	return c.Name
}

// SortCertificates orders certificates by name, issuing before accepted,
// then by end: the order status.certificates is written in, so that the
// same certificates are the same status.
func SortCertificates(certs []CertificateExpiry) {
	slices.SortFunc(certs, func(a, b CertificateExpiry) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), boolCompare(a.Accepted, b.Accepted), a.NotAfter.Compare(b.NotAfter))
	})
}

func boolCompare(a, b bool) int {
	switch {
	case a == b:
		return 0
	case b:
		return -1
	}
	return 1
}

// CertificatesEndingBy are the certificates whose end is at or before t,
// earliest first.
func CertificatesEndingBy(certs []CertificateExpiry, t time.Time) []CertificateExpiry {
	var out []CertificateExpiry
	for _, c := range certs {
		if !c.NotAfter.After(t) {
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(a, b CertificateExpiry) int { return a.NotAfter.Compare(b.NotAfter) })
	return out
}

// CertificatesCondition is ConditionCertificatesExpiring for certs as of
// now, and false when there is nothing to judge (no certificates). Its
// message holds dates only, not time left, so it changes when a certificate
// enters the window or ends, not every day.
func CertificatesCondition(certs []CertificateExpiry, now time.Time) (Condition, bool) {
	if len(certs) == 0 {
		return Condition{}, false
	}
	c := Condition{Type: ConditionCertificatesExpiring}
	ending := CertificatesEndingBy(certs, now.Add(CertificateWarningWindow))
	if len(ending) == 0 {
		first := slices.MinFunc(certs, func(a, b CertificateExpiry) int { return a.NotAfter.Compare(b.NotAfter) })
		c.Status, c.Reason = "False", ReasonCertificatesValid
		c.Message = fmt.Sprintf("nothing ends within %d days; the first to end is %s, on %s",
			int(CertificateWarningWindow/(24*time.Hour)), first.Label(), first.NotAfter.UTC().Format(time.RFC3339))
		return c, true
	}
	c.Status, c.Reason = "True", ReasonCertificatesExpiring
	parts := make([]string, len(ending))
	for i, e := range ending {
		verb := "ends"
		if !e.NotAfter.After(now) {
			verb, c.Reason = "ended", ReasonCertificatesExpired
		}
		parts[i] = fmt.Sprintf("%s %s %s", e.Label(), verb, e.NotAfter.UTC().Format(time.RFC3339))
	}
	c.Message = strings.Join(parts, "; ")
	return c, true
}

// NextCertificatesCheck is the first moment after now at which
// CertificatesCondition changes for certs with nothing else changing (a
// certificate enters the warning window, or ends: both turn at the instant
// itself); zero when none will.
func NextCertificatesCheck(certs []CertificateExpiry, now time.Time) time.Time {
	var next time.Time
	for _, c := range certs {
		for _, t := range []time.Time{c.NotAfter.Add(-CertificateWarningWindow), c.NotAfter} {
			if t.After(now) && (next.IsZero() || t.Before(next)) {
				next = t
			}
		}
	}
	return next
}

func validateCertificates(certs []CertificateExpiry, f *field.Path) []Cause {
	if len(certs) > MaxTenantCertificates {
		return []Cause{{Field: f.String(), Type: CauseTooLong, Message: fmt.Sprintf("at most %d certificates", MaxTenantCertificates)}}
	}
	var causes []Cause
	for i, c := range certs {
		if c.Name == "" {
			causes = append(causes, Cause{Field: f.Index(i).Child("name").String(), Type: CauseRequired, Message: "name is required"})
		}
		if c.NotAfter.IsZero() {
			causes = append(causes, Cause{Field: f.Index(i).Child("notAfter").String(), Type: CauseRequired, Message: "notAfter is required"})
		}
	}
	return causes
}
