package webui

import (
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// Certificate states on the tenant page.
const (
	certificateValid    = "valid"
	certificateExpiring = "expiring"
	certificateExpired  = "expired"
)

// certificateState is expired, expiring (within the CertificatesExpiring
// window) or valid as of now.
func certificateState(c domain.CertificateExpiry, now time.Time) string {
	switch {
	case !c.NotAfter.After(now):
		return certificateExpired
	case !c.NotAfter.After(now.Add(domain.CertificateWarningWindow)):
		return certificateExpiring
	}
	return certificateValid
}

// certificateEnds says when c ends relative to now: "in 61d", "ended 3d ago".
func certificateEnds(c domain.CertificateExpiry, now time.Time) string {
	if certificateState(c, now) == certificateExpired {
		return "ended " + shortDuration(now.Sub(c.NotAfter)) + " ago"
	}
	return "in " + shortDuration(c.NotAfter.Sub(now))
}

func certificateClass(c domain.CertificateExpiry, now time.Time) string {
	switch certificateState(c, now) {
	case certificateExpired:
		return "font-semibold text-red-700"
	case certificateExpiring:
		return "font-semibold text-amber-800"
	}
	return "text-slate-500"
}

// endsWithin reports whether one of certs ends (or has ended) by now+d.
func endsWithin(certs []domain.CertificateExpiry, now time.Time, d time.Duration) bool {
	return len(domain.CertificatesEndingBy(certs, now.Add(d))) > 0
}
