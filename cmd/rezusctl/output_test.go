package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// golden compares got with testdata/<name>.golden (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, string(want), got)
}

// sampleObjects is one object of each kind with a table column of its own.
func sampleObjects() map[string][]*item {
	created := time.Date(2026, 5, 1, 9, 30, 0, 0, time.UTC)
	mk := func(kind, tenant, name, spec, status string, labels map[string]string) *item {
		o := obj(kind, tenant, name, created, spec, status, labels)
		raw := objectBytes(o)
		return &item{Raw: raw, Obj: o}
	}
	return map[string][]*item{
		"tenants": {
			mk("Tenant", "", "acme", `{"talosVersion":"v1.13.0","kubernetesVersion":"v1.36.0"}`, `{"phase":"Ready","machines":{"total":3},"conditions":[{"type":"Drifted","status":"True","reason":"InfrastructureDrifted","message":"1 to add, 0 to change, 0 to destroy","lastTransitionTime":"2026-05-01T11:58:00Z"}],"drift":{"checkedAt":"2026-05-01T11:58:00Z","summary":"1 to add, 0 to change, 0 to destroy","add":1,"change":0,"destroy":0}}`, map[string]string{"env": "prod", "team": "a"}),
			mk("Tenant", "", "beta-long-name", `{"talosVersion":"v1.12.1","kubernetesVersion":"v1.35.0"}`, `{"phase":"Pending","conditions":[{"type":"Drifted","status":"Unknown","reason":"CheckFailed","message":"tofu plan: boom","lastTransitionTime":"2026-05-01T11:58:00Z"}]}`, nil),
		},
		"nodegroups": {
			mk("NodeGroup", "acme", "cp", `{"role":"controlplane","count":3,"provider":"emu"}`, ``, nil),
			mk("NodeGroup", "beta", "workers", `{"role":"worker","count":10,"provider":"oci-fra"}`, ``, map[string]string{"pool": "a"}),
			mk("NodeGroup", "beta", "burst", `{"role":"worker","count":3,"provider":"oci-fra","autoscaling":{"minCount":0,"maxCount":5},"members":{"indexes":[0,2,4],"next":5}}`, ``, nil),
		},
		"machines": {
			mk("Machine", "acme", "cp-0", `{"nodeGroup":"cp","role":"controlplane","address":"10.0.0.10"}`, `{"stage":"Running","ready":true,"talosVersion":"v1.13.0","configUpToDate":true,"node":"Ready","lastSeen":"2026-05-01T11:59:30Z"}`, nil),
			mk("Machine", "acme", "cp-1", `{"nodeGroup":"cp","role":"controlplane"}`, `{"stage":"Unknown","ready":false,"configUpToDate":false}`, nil),
			mk("Machine", "acme", "w-0", `{"nodeGroup":"workers","role":"worker","address":"10.0.0.20"}`,
				`{"stage":"Running","ready":false,"talosVersion":"v1.13.0","configUpToDate":false,"node":"NotReady","conditions":[{"type":"ConfigApplied","status":"False","reason":"ApplyFailed","message":"the node refused the config: unavailable","lastTransitionTime":"2026-05-01T11:58:00Z"}]}`, nil),
		},
		"configpatches": {
			mk("ConfigPatch", "acme", "ntp", `{"target":{"kind":"all"},"format":"strategic","enabled":true,"patch":"machine:\n  time: {}\n"}`, ``, nil),
			mk("ConfigPatch", "acme", "gpu", `{"target":{"kind":"nodeGroup","name":"gpu"},"format":"json6902","enabled":false,"patch":"[]"}`, ``, nil),
		},
		"providers": {
			mk("Provider", "", "emu", `{"type":"emulated"}`, ``, nil),
			mk("Provider", "", "lab", `{"type":"module","module":{"files":{"main.tf":"locals {}\n"}}}`,
				`{"conditions":[{"type":"Validated","status":"False","reason":"Invalid","message":"main.tf:1:1: Missing required argument: x","lastTransitionTime":"2026-05-01T11:58:00Z"}]}`, nil),
			mk("Provider", "", "lab-ok", `{"type":"module","module":{"files":{"main.tf":"locals {}\n"}}}`,
				`{"conditions":[{"type":"Validated","status":"True","reason":"Valid","lastTransitionTime":"2026-05-01T11:58:00Z"}]}`, nil),
		},
		"etcdbackups": {
			mk("EtcdBackup", "acme", "sched-20260501-0600", `{"trigger":"schedule","slot":"2026-05-01T06:00:00Z"}`,
				`{"phase":"Succeeded","size":13107200,"sha256":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","etcdRevision":4711,"member":"cp-2","storedSize":13110000}`, nil),
			mk("EtcdBackup", "acme", "manual-20260501-093000", `{"trigger":"manual"}`, `{"phase":"Failed","reason":"no control plane has a healthy etcd member"}`, nil),
		},
		"restores": {
			mk("Restore", "acme", "restore-20260501-100000", `{"backup":"sched-20260501-0600"}`, `{"phase":"Running","stage":"Joining","member":"cp-1","etcdRevision":4711}`, nil),
		},
		"users": {
			mk("User", "", "alice", `{"role":"edit"}`, ``, nil),
			mk("User", "", "carol", `{"role":"none","bindings":[{"role":"admin","tenants":["acme"]},{"role":"view","tenantSelector":"team=a"}]}`, ``, nil),
		},
		"apitokens": {
			mk("APIToken", "", "ci-1a2b", `{"user":"alice","expiresAt":"2026-06-01T00:00:00Z"}`, `{}`, nil),
			mk("APIToken", "", "forever", `{"user":"bob"}`, `{}`, nil),
			mk("APIToken", "", "deploy", `{"user":"carol","bindings":[{"role":"edit","tenants":["acme","beta"]}]}`, `{}`, nil),
		},
	}
}

func TestPrinterFormats(t *testing.T) {
	now := func() time.Time { return time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC) }
	samples := sampleObjects()
	for _, plural := range []string{"tenants", "nodegroups", "machines", "configpatches", "providers", "users", "apitokens", "etcdbackups", "restores"} {
		k, err := resolveKind(plural)
		require.NoError(t, err)
		var items []item
		for _, it := range samples[plural] {
			items = append(items, *it)
		}
		for _, format := range []string{outTable, outWide, outName, outJSON, outYAML} {
			all := k.TenantScoped
			t.Run(plural+"/"+format, func(t *testing.T) {
				var b bytes.Buffer
				p := newPrinter(&b, format, k, all, now)
				require.NoError(t, p.printList(items, "42"))
				golden(t, plural+"."+format, b.String())
			})
		}
	}
}

// A watch prints rows as changes come, aligned with the rows before them.
func TestPrinterWatchRows(t *testing.T) {
	now := func() time.Time { return time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC) }
	k, _ := resolveKind("ng")
	s := sampleObjects()["nodegroups"]
	var b bytes.Buffer
	p := newPrinter(&b, outTable, k, false, now)
	p.watchEvents = true
	require.NoError(t, p.printList([]item{*s[0]}, "1"))
	require.NoError(t, p.printOne(*s[1], "MODIFIED"))
	require.NoError(t, p.printOne(*s[0], "DELETED"))
	golden(t, "watch.table", b.String())

	b.Reset()
	p = newPrinter(&b, outYAML, k, false, now)
	require.NoError(t, p.printOne(*s[0], "ADDED"))
	require.NoError(t, p.printOne(*s[1], "MODIFIED"))
	golden(t, "watch.yaml", b.String())
}

func TestHumanDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"},
		{0, "0s"},
		{45 * time.Second, "45s"},
		{119 * time.Second, "119s"},
		{3*time.Minute + 20*time.Second, "3m20s"},
		{5 * time.Minute, "5m"},
		{90 * time.Minute, "90m"},
		{5*time.Hour + 10*time.Minute, "5h10m"},
		{6 * time.Hour, "6h"},
		{30 * time.Hour, "30h"},
		{3*24*time.Hour + 4*time.Hour, "3d4h"},
		{12 * 24 * time.Hour, "12d"},
		{(2*365 + 30) * 24 * time.Hour, "2y30d"},
		{10 * 365 * 24 * time.Hour, "10y"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, humanDuration(tt.d), tt.d.String())
	}
}
