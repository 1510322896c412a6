package domain_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestTenantBackupSchedule: spec.etcdBackup's interval is a duration of at
// least 5m and at most a year, keep is 1 to 1000 (default 7 with an
// interval), and each bad value is reported on its field.
func TestTenantBackupSchedule(t *testing.T) {
	withSchedule := func(s string) string { return `{"etcdBackup":` + s + `}` }
	runSpecCases(t, "Tenant", []specCase{
		{name: "interval and keep", spec: withSchedule(`{"interval":"6h","keep":14}`)},
		{name: "keep defaults to 7", spec: withSchedule(`{"interval":"90m"}`), want: `{"talosVersion":"v1.13.0","kubernetesVersion":"v1.35.4","controlPlane":{},` +
			`"network":{"podSubnets":["10.244.0.0/16"],"serviceSubnets":["10.96.0.0/12"],"dnsDomain":"cluster.local"},"etcdBackup":{"interval":"90m","keep":7}}`},
		{name: "empty is off", spec: withSchedule(`{}`)},
		{name: "the shortest interval", spec: withSchedule(`{"interval":"5m"}`)},
		{name: "interval too short", spec: withSchedule(`{"interval":"4m59s"}`), fields: []string{"spec.etcdBackup.interval"}},
		{name: "interval zero", spec: withSchedule(`{"interval":"0s"}`), fields: []string{"spec.etcdBackup.interval"}},
		{name: "interval negative", spec: withSchedule(`{"interval":"-6h"}`), fields: []string{"spec.etcdBackup.interval"}},
		{name: "interval too long", spec: withSchedule(`{"interval":"9000h"}`), fields: []string{"spec.etcdBackup.interval"}},
		{name: "interval not a duration", spec: withSchedule(`{"interval":"daily"}`), fields: []string{"spec.etcdBackup.interval"}},
		{name: "interval a number", spec: withSchedule(`{"interval":3600}`), fields: []string{"spec.etcdBackup.interval"}},
		{name: "keep too many", spec: withSchedule(`{"interval":"6h","keep":1001}`), fields: []string{"spec.etcdBackup.keep"}},
		{name: "keep the most", spec: withSchedule(`{"interval":"6h","keep":1000}`)},
		{name: "keep negative", spec: withSchedule(`{"interval":"6h","keep":-1}`), fields: []string{"spec.etcdBackup.keep"}},
		{name: "keep without an interval", spec: withSchedule(`{"keep":3}`), fields: []string{"spec.etcdBackup.interval"}},
		{name: "both bad", spec: withSchedule(`{"interval":"1m","keep":5000}`), fields: []string{"spec.etcdBackup.interval", "spec.etcdBackup.keep"}},
		{name: "unknown field", spec: withSchedule(`{"interval":"6h","every":"1h"}`), fields: []string{"spec.etcdBackup.every"}},
	})
}

// TestTenantBackupScheduleDefaults: a new tenant gets 24h/7 unless it says
// otherwise; an update that leaves the schedule out keeps it (on or off);
// {} turns it off.
func TestTenantBackupScheduleDefaults(t *testing.T) {
	ref := domain.TenantRef("t1")
	create := func(spec string) *domain.Object {
		evs, err := domain.Decide(nil, domain.Command{Op: domain.OpCreate, Ref: ref, Now: time.Now(), NewUID: "u",
			Object: &domain.Object{Metadata: domain.ObjectMeta{Name: "t1"}, Spec: json.RawMessage(spec)}})
		require.NoError(t, err)
		return evs[0].Object
	}
	update := func(cur *domain.Object, spec string) *domain.Object {
		cur.Metadata.ResourceVersion = "1"
		evs, err := domain.Decide(cur, domain.Command{Op: domain.OpUpdate, Ref: ref, Now: time.Now(),
			Object: &domain.Object{Metadata: domain.ObjectMeta{Name: "t1"}, Spec: json.RawMessage(spec)}})
		require.NoError(t, err)
		if len(evs) == 0 {
			return cur
		}
		return evs[0].Object
	}
	schedule := func(o *domain.Object) *domain.EtcdBackupSchedule {
		var s domain.TenantSpec
		require.NoError(t, json.Unmarshal(o.Spec, &s))
		return s.EtcdBackup
	}

	o := create(`{}`)
	require.Equal(t, &domain.EtcdBackupSchedule{Interval: "24h", Keep: 7}, schedule(o), "a new tenant's default")
	o = update(o, `{"talosVersion":"v1.13.0"}`)
	require.Equal(t, &domain.EtcdBackupSchedule{Interval: "24h", Keep: 7}, schedule(o), "an update without it keeps it")
	o = update(o, `{"etcdBackup":{}}`)
	require.False(t, schedule(o).Enabled(), "{} turns it off")
	o = update(o, `{}`)
	require.False(t, schedule(o).Enabled(), "and it stays off")

	o = create(`{"etcdBackup":{"interval":"6h","keep":14}}`)
	require.Equal(t, &domain.EtcdBackupSchedule{Interval: "6h", Keep: 14}, schedule(o))
	require.False(t, schedule(create(`{"etcdBackup":{}}`)).Enabled(), "a new tenant can start without one")

	// A tenant stored before schedules existed has none, and keeps none.
	old := &domain.Object{APIVersion: domain.APIVersion, Kind: "Tenant", Metadata: domain.ObjectMeta{Name: "t1", UID: "u", Generation: 1},
		Spec: json.RawMessage(tenantDefaultSpec)}
	o = update(old, `{"talosVersion":"v1.13.0"}`)
	require.Nil(t, schedule(o))
}

func TestEtcdBackupAndRestoreSpecs(t *testing.T) {
	runSpecCases(t, "EtcdBackup", []specCase{
		{name: "empty is a manual backup", spec: `{}`, want: `{"trigger":"manual"}`},
		{name: "scheduled with its slot", spec: `{"trigger":"schedule","slot":"2026-01-02T06:00:00Z"}`},
		{name: "scheduled without a slot", spec: `{"trigger":"schedule"}`, fields: []string{"spec.slot"}},
		{name: "manual with a slot", spec: `{"trigger":"manual","slot":"2026-01-02T06:00:00Z"}`, fields: []string{"spec.slot"}},
		{name: "unknown trigger", spec: `{"trigger":"cron"}`, fields: []string{"spec.trigger"}},
	})
	runSpecCases(t, "Restore", []specCase{
		{name: "a backup", spec: `{"backup":"sched-20260102-0600"}`},
		{name: "no backup", spec: `{}`, fields: []string{"spec.backup"}},
		{name: "a bad name", spec: `{"backup":"Not_A_Name"}`, fields: []string{"spec.backup"}},
	})
}

func TestBackupSlotAndName(t *testing.T) {
	at := time.Date(2026, 1, 2, 7, 31, 12, 0, time.FixedZone("x", 3600))
	slot := domain.BackupSlot(at, 6*time.Hour)
	require.Equal(t, time.Date(2026, 1, 2, 6, 0, 0, 0, time.UTC), slot)
	require.Equal(t, "sched-20260102-0600", domain.ScheduledBackupName(slot))
	require.Equal(t, slot, domain.BackupSlot(slot.Add(6*time.Hour-time.Nanosecond), 6*time.Hour))
	require.Empty(t, domain.ValidateName(domain.ScheduledBackupName(slot), "n"))
}
