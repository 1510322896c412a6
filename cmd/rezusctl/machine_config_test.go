package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// machineEvent is one event of machine cp-0 as /api/v1/events serves it: its
// post-image holds the config hash (a letter repeated) and the status.
func machineEvent(seq int, typ, actor, at string, hash byte, status string) string {
	ann := ""
	if hash != 0 {
		ann = fmt.Sprintf(`,"annotations":{%q:%q}`, domain.AnnotationConfigHash, strings.Repeat(string(hash), 64))
	}
	return fmt.Sprintf(`{"seq":%d,"type":%q,"action":"Updated","actor":%q,"time":"2026-05-01T%sZ",`+
		`"object":{"kind":"Machine","metadata":{"name":"cp-0","tenant":"acme"%s},"spec":{"nodeGroup":"cp","role":"controlplane"},"status":%s}}`,
		seq, typ, actor, at, ann, status)
}

// configStatus is a machine status with configUpToDate and, unless reason is
// "", a ConfigApplied condition.
func configStatus(upToDate bool, condStatus, reason, message string) string {
	cond := ""
	if reason != "" {
		cond = fmt.Sprintf(`,"conditions":[{"type":"Ready","status":"True"},{"type":"ConfigApplied","status":%q,"reason":%q,"message":%q,"lastTransitionTime":"2026-05-01T11:00:00Z"}]`,
			condStatus, reason, message)
	}
	return fmt.Sprintf(`{"stage":"Running","ready":true,"configUpToDate":%t%s}`, upToDate, cond)
}

func TestDescribeMachineConfigHistory(t *testing.T) {
	f, srv := newFakeAPI(t)
	f.put("/api/v1/tenants/acme/machines/cp-0", obj("Machine", "acme", "cp-0", tcNow, `{"nodeGroup":"cp","role":"controlplane"}`,
		configStatus(true, "True", "AppliedWithReboot", "rebooted: machine.install changed"), nil))
	inPlace, failed := configStatus(true, "True", "AppliedInPlace", "applied in place"), configStatus(false, "False", "ApplyFailed", "the node refused the config: unavailable")
	rebooted := configStatus(true, "True", "AppliedWithReboot", "rebooted: machine.install changed")
	events := []string{
		machineEvent(3, "MachineCreated", "system:apply", "11:00:00", 'a', `{"stage":"Unknown","ready":false,"configUpToDate":false}`),
		machineEvent(4, "MachineStatusUpdated", "system:apply", "11:00:01", 'a', configStatus(true, "True", "Day0", "user data")),
		machineEvent(5, "MachineStatusUpdated", "system:status", "11:01:00", 'a', configStatus(true, "True", "Day0", "user data")),
		// A patch: the hash first (the post-image still shows Day0), then how.
		machineEvent(7, domain.EventMachineConfigApplied, "system:config", "11:10:00", 'b', configStatus(true, "True", "Day0", "user data")),
		machineEvent(8, "MachineStatusUpdated", "system:config", "11:10:01", 'b', inPlace),
		// The next config is refused, twice with the same cause (one row).
		machineEvent(10, "MachineStatusUpdated", "system:config", "11:20:00", 'b', failed),
		machineEvent(11, "MachineStatusUpdated", "system:status", "11:20:30", 'b', strings.Replace(failed, `"ready":true`, `"ready":false`, 1)),
		// The fault lifted: it converges with a reboot.
		machineEvent(12, domain.EventMachineConfigApplied, "system:config", "11:30:00", 'c', failed),
		machineEvent(13, "MachineStatusUpdated", "system:config", "11:30:02", 'c', rebooted),
		// Applied the same way as the one before: the recorder writes no status.
		machineEvent(14, domain.EventMachineConfigApplied, "system:config", "11:40:00", 'd', rebooted),
	}
	f.handle("GET /api/v1/events", func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "kind=Machine&name=cp-0&tenant=acme", r.URL.RawQuery)
		fmt.Fprintf(w, `{"kind":"EventList","metadata":{},"items":[%s]}`, strings.Join(events, ","))
	})
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	out := tc.ok("describe", "machine", "cp-0")
	history := out[strings.Index(out, "Config History:"):strings.Index(out, "Events:")]
	require.Equal(t, `Config History:
  TIME                   ACTOR           HASH           RESULT              MESSAGE
  2026-05-01T11:00:00Z   system:apply    aaaaaaaaaaaa   Day0                user data
  2026-05-01T11:10:00Z   system:config   bbbbbbbbbbbb   AppliedInPlace      applied in place
  2026-05-01T11:20:00Z   system:config   -              ApplyFailed         the node refused the config: unavailable
  2026-05-01T11:30:00Z   system:config   cccccccccccc   AppliedWithReboot   rebooted: machine.install changed
  2026-05-01T11:40:00Z   system:config   dddddddddddd   AppliedWithReboot   rebooted: machine.install changed
`, history)
	require.Contains(t, out, "14    2026-05-01T11:40:00Z   system:config   MachineConfigApplied\n", "the generic events table stays")

	// Other kinds have no config history.
	f.put("/api/v1/tenants/acme/nodegroups/cp", obj("NodeGroup", "acme", "cp", tcNow, `{"role":"controlplane","count":1}`, "", nil))
	f.handle("GET /api/v1/events", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"items":[]}`) })
	require.NotContains(t, tc.ok("describe", "ng", "cp"), "Config History")
}

// A hash whose outcome is not recorded yet says so; a config that was not
// up to date when the next hash came has no outcome to show.
func TestConfigHistoryOutcomes(t *testing.T) {
	rec := func(raw string) record {
		r, err := parseRecord(json.RawMessage(raw), "")
		require.NoError(t, err)
		return r
	}
	pending := configStatus(false, "True", "Day0", "user data")
	tests := []struct {
		name   string
		events []string
		want   string
	}{
		{"no events", nil, "Config History: <none>\n"},
		{"no hash yet", []string{machineEvent(1, "MachineCreated", "system:apply", "11:00:00", 0, pending)}, "Config History: <none>\n"},
		{"the status has not followed yet", []string{
			machineEvent(1, "MachineCreated", "system:apply", "11:00:00", 'a', pending),
			machineEvent(2, domain.EventMachineConfigApplied, "system:config", "11:10:00", 'b', pending),
		}, "Config History:\n" +
			"  TIME                   ACTOR           HASH           RESULT      MESSAGE\n" +
			"  2026-05-01T11:00:00Z   system:apply    aaaaaaaaaaaa   Day0        user data\n" +
			"  2026-05-01T11:10:00Z   system:config   bbbbbbbbbbbb   <pending>   <none>\n"},
		{"a hash over a hash never confirmed", []string{
			machineEvent(1, domain.EventMachineConfigApplied, "system:config", "11:00:00", 'a', pending),
			machineEvent(2, domain.EventMachineConfigApplied, "system:config", "11:10:00", 'b', pending),
			machineEvent(3, "MachineStatusUpdated", "system:config", "11:10:01", 'b', configStatus(true, "True", "AppliedInPlace", "")),
		}, "Config History:\n" +
			"  TIME                   ACTOR           HASH           RESULT           MESSAGE\n" +
			"  2026-05-01T11:00:00Z   system:config   aaaaaaaaaaaa   <none>           <none>\n" +
			"  2026-05-01T11:10:00Z   system:config   bbbbbbbbbbbb   AppliedInPlace   <none>\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newConfigHistory()
			for _, e := range tc.events {
				h.add(rec(e))
			}
			var b bytes.Buffer
			describeConfigHistory(&b, h, nil)
			require.Equal(t, tc.want, b.String())
		})
	}
}

func TestMachineConfigColumn(t *testing.T) {
	for _, tc := range []struct{ status, want string }{
		{"", ""},
		{configStatus(true, "True", "AppliedInPlace", ""), "up to date"},
		{configStatus(false, "True", "Day0", ""), "pending"},
		{configStatus(false, "False", "RenderFailed", "patch x does not apply"), "failed (RenderFailed)"},
	} {
		o := obj("Machine", "acme", "cp-0", tcNow, `{}`, tc.status, nil)
		require.Equal(t, tc.want, machineConfigCell(o, tcNow), tc.status)
	}
}
