package domain

import (
	"fmt"
	"slices"
	"strings"
	"time"
	// Windows name IANA time zones; a host without a zone database (a
	// minimal container) must still know them.
	_ "time/tzdata"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Maintenance windows: when disruptive work that is not urgent (Talos and
// Kubernetes upgrades) may start on a tenant's machines.

// Bounds of maintenance windows.
const (
	MinMaintenanceWindow  = 30 * time.Minute
	MaxMaintenanceWindow  = 7 * 24 * time.Hour
	MaxMaintenanceWindows = 16
)

// maintenanceDays are the day names a window takes, in time.Weekday order.
var maintenanceDays = []string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}

// Maintenance is a tenant's maintenance windows; none (or no spec) means
// any time.
type Maintenance struct {
	Windows []MaintenanceWindow `json:"windows,omitempty"`
	// OpenUntil opens the windows now, until then: an explicit override
	// for everything that waits for a window — config changes that reboot,
	// non-urgent replacements, upgrades — (`rezusctl maintenance open TENANT
	// --for 2h`; the write is in the audit log like every write). One
	// upgrade alone is let through by its spec.now instead.
	OpenUntil *time.Time `json:"openUntil,omitempty"`
}

// MaintenanceWindow opens at Start on each of Days, in TimeZone, for Duration.
type MaintenanceWindow struct {
	// Days are Mon..Sun; empty: every day.
	Days []string `json:"days,omitempty"`
	// Start is the local time it opens, HH:MM (24 h).
	Start string `json:"start"`
	// Duration is how long it stays open, a Go duration of at least 30m.
	Duration string `json:"duration"`
	// TimeZone is an IANA zone (Europe/Berlin); default UTC.
	TimeZone string `json:"timeZone,omitempty"`
}

// Default fills in the time zone.
func (m *Maintenance) Default() {
	for i := range m.Windows {
		if m.Windows[i].TimeZone == "" {
			m.Windows[i].TimeZone = "UTC"
		}
	}
}

// Validate reports every bad field.
func (m *Maintenance) Validate(f *field.Path) []Cause {
	var causes []Cause
	if len(m.Windows) > MaxMaintenanceWindows {
		causes = append(causes, Cause{Field: f.Child("windows").String(), Type: CauseTooLong, Message: fmt.Sprintf("at most %d windows", MaxMaintenanceWindows)})
	}
	for i, w := range m.Windows {
		p := f.Child("windows").Index(i)
		for j, d := range w.Days {
			if dayIndex(d) < 0 {
				causes = append(causes, Cause{Field: p.Child("days").Index(j).String(), Type: CauseNotSupported,
					Message: fmt.Sprintf("%q is not a day: use %s", d, strings.Join(append(maintenanceDays[1:], maintenanceDays[0]), ", "))})
			}
		}
		if _, _, ok := parseClock(w.Start); !ok {
			causes = append(causes, Cause{Field: p.Child("start").String(), Type: CauseInvalid, Message: fmt.Sprintf("%q is not a time of day HH:MM, e.g. 02:00", w.Start)})
		}
		d, err := time.ParseDuration(w.Duration)
		switch {
		case err != nil:
			causes = append(causes, Cause{Field: p.Child("duration").String(), Type: CauseInvalid, Message: fmt.Sprintf("%q is not a duration (e.g. 4h)", w.Duration)})
		case d < MinMaintenanceWindow || d > MaxMaintenanceWindow:
			causes = append(causes, Cause{Field: p.Child("duration").String(), Type: CauseInvalid, Message: fmt.Sprintf("must be between %s and %s, got %s", MinMaintenanceWindow, MaxMaintenanceWindow, w.Duration)})
		}
		if w.TimeZone != "" {
			if _, err := time.LoadLocation(w.TimeZone); err != nil {
				causes = append(causes, Cause{Field: p.Child("timeZone").String(), Type: CauseInvalid, Message: fmt.Sprintf("%q is not an IANA time zone (e.g. Europe/Berlin)", w.TimeZone)})
			}
		}
	}
	return causes
}

func dayIndex(d string) int {
	return slices.IndexFunc(maintenanceDays, func(n string) bool { return strings.EqualFold(n, d) })
}

func parseClock(s string) (h, m int, ok bool) {
	t, err := time.Parse("15:04", s)
	if err != nil {
		return 0, 0, false
	}
	return t.Hour(), t.Minute(), true
}

// MaintenanceOpen decides whether disruptive work may start at now: true
// when the tenant has no windows or now is inside one; else false and when
// the next window opens (zero when none ever does, which a valid spec never
// gives). A window that opened the day before and is still open counts.
func MaintenanceOpen(m *Maintenance, now time.Time) (open bool, next time.Time) {
	if m == nil || len(m.Windows) == 0 || (m.OpenUntil != nil && now.Before(*m.OpenUntil)) {
		return true, time.Time{}
	}
	for _, w := range m.Windows {
		loc, err := time.LoadLocation(w.TimeZone)
		if err != nil || w.TimeZone == "" {
			loc = time.UTC
		}
		h, mi, ok := parseClock(w.Start)
		d, err := time.ParseDuration(w.Duration)
		if !ok || err != nil {
			continue
		}
		local := now.In(loc)
		// Windows last at most a week: starts from 8 days back cover every
		// one still open; 8 days ahead, the next one.
		for off := -8; off <= 8; off++ {
			day := time.Date(local.Year(), local.Month(), local.Day()+off, h, mi, 0, 0, loc)
			if len(w.Days) > 0 && !slices.ContainsFunc(w.Days, func(n string) bool { return dayIndex(n) == int(day.Weekday()) }) {
				continue
			}
			switch {
			case !now.Before(day) && now.Before(day.Add(d)):
				return true, time.Time{}
			case day.After(now) && (next.IsZero() || day.Before(next)):
				next = day
			}
		}
	}
	return false, next
}

// MaintenanceWaiting is what a run waiting for a window says:
// "Waiting for maintenance window (opens Sat 02:00 CET)".
func MaintenanceWaiting(m *Maintenance, next time.Time) string {
	if next.IsZero() {
		return "Waiting for maintenance window"
	}
	// The zone of the window that opens next, as its owner wrote it.
	for _, w := range m.Windows {
		if loc, err := time.LoadLocation(w.TimeZone); err == nil {
			if h, mi, ok := parseClock(w.Start); ok {
				if l := next.In(loc); l.Hour() == h && l.Minute() == mi {
					next = l
					break
				}
			}
		}
	}
	return "Waiting for maintenance window (opens " + next.Format("Mon 15:04 MST") + ")"
}
