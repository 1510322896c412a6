package domain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestMaintenanceValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		w     MaintenanceWindow
		field string
	}{
		{"a weekend night in Berlin", MaintenanceWindow{Days: []string{"Sat", "sun"}, Start: "02:00", Duration: "4h", TimeZone: "Europe/Berlin"}, ""},
		{"every day, UTC", MaintenanceWindow{Start: "23:30", Duration: "30m"}, ""},
		{"not a day", MaintenanceWindow{Days: []string{"Caturday"}, Start: "02:00", Duration: "4h"}, "spec.maintenance.windows[0].days[0]"},
		{"not a time", MaintenanceWindow{Start: "2am", Duration: "4h"}, "spec.maintenance.windows[0].start"},
		{"too short", MaintenanceWindow{Start: "02:00", Duration: "10m"}, "spec.maintenance.windows[0].duration"},
		{"not a zone", MaintenanceWindow{Start: "02:00", Duration: "1h", TimeZone: "Mars/Olympus"}, "spec.maintenance.windows[0].timeZone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := Maintenance{Windows: []MaintenanceWindow{tc.w}}
			causes := m.Validate(field.NewPath("spec", "maintenance"))
			if tc.field == "" {
				require.Empty(t, causes)
				return
			}
			require.Len(t, causes, 1)
			require.Equal(t, tc.field, causes[0].Field)
		})
	}
}

func TestMaintenanceOpen(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	weekend := &Maintenance{Windows: []MaintenanceWindow{{Days: []string{"Sat", "Sun"}, Start: "02:00", Duration: "4h", TimeZone: "Europe/Berlin"}}}
	late := &Maintenance{Windows: []MaintenanceWindow{{Days: []string{"Fri"}, Start: "23:00", Duration: "3h", TimeZone: "UTC"}}}
	at := func(loc *time.Location, y int, mo time.Month, d, h, mi int) time.Time {
		return time.Date(y, mo, d, h, mi, 0, 0, loc)
	}
	// 2026-12-05 is a Saturday.
	for _, tc := range []struct {
		name string
		m    *Maintenance
		now  time.Time
		open bool
		next time.Time
	}{
		{"no windows: any time", nil, at(time.UTC, 2026, 12, 2, 12, 0), true, time.Time{}},
		{"Wednesday noon: waits for Saturday 02:00 Berlin", weekend, at(time.UTC, 2026, 12, 2, 12, 0), false, at(berlin, 2026, 12, 5, 2, 0)},
		{"Saturday 03:00 Berlin: open", weekend, at(berlin, 2026, 12, 5, 3, 0), true, time.Time{}},
		{"Saturday 06:00 Berlin: just closed, Sunday next", weekend, at(berlin, 2026, 12, 5, 6, 0), false, at(berlin, 2026, 12, 6, 2, 0)},
		{"Saturday 01:00 UTC is 02:00 Berlin: open", weekend, at(time.UTC, 2026, 12, 5, 1, 0), true, time.Time{}},
		{"a Friday window still open after midnight", late, at(time.UTC, 2026, 12, 5, 1, 30), true, time.Time{}},
		{"summer time: 02:00 Berlin is 00:00 UTC", weekend, at(time.UTC, 2026, 7, 4, 0, 30), true, time.Time{}},
		{"opened by hand until 14:00: open at noon", openUntil(weekend, at(time.UTC, 2026, 12, 2, 14, 0)), at(time.UTC, 2026, 12, 2, 12, 0), true, time.Time{}},
		{"opened by hand until 14:00: closed again at 14:00", openUntil(weekend, at(time.UTC, 2026, 12, 2, 14, 0)), at(time.UTC, 2026, 12, 2, 14, 0), false, at(berlin, 2026, 12, 5, 2, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			open, next := MaintenanceOpen(tc.m, tc.now)
			require.Equal(t, tc.open, open)
			require.True(t, tc.next.Equal(next), "next %s, want %s", next, tc.next)
		})
	}
	_, next := MaintenanceOpen(weekend, at(time.UTC, 2026, 12, 2, 12, 0))
	require.Equal(t, "Waiting for maintenance window (opens Sat 02:00 CET)", MaintenanceWaiting(weekend, next))
}

func openUntil(m *Maintenance, until time.Time) *Maintenance {
	c := *m
	c.OpenUntil = &until
	return &c
}
