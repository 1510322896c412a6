package webui

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
)

// withStateStore gives the API a state store, returned through into.
func withStateStore(t testing.TB, into **eventstore.StateStore) stackOption {
	return func(d *handlers.Deps) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := eventstore.OpenStateStore(ctx, d.Store)
		require.NoError(t, err)
		d.State, *into = st, st
	}
}

// plainState is a tofu v4 state with the given resources, as JSON.
func plainState(serial int, resources ...map[string]any) []byte {
	raw, _ := json.Marshal(map[string]any{"version": 4, "terraform_version": "1.10.0", "serial": serial,
		"lineage": "lin-1", "outputs": map[string]any{}, "resources": resources})
	return raw
}

func instanceResource(typ, name string, instances ...map[string]any) map[string]any {
	return map[string]any{"mode": "managed", "type": typ, "name": name, "provider": `provider["x"]`, "instances": instances}
}

func TestDiffStateResources(t *testing.T) {
	from, err := readStateResources(plainState(1,
		instanceResource("null_resource", "a", map[string]any{"attributes": map[string]any{"id": "1", "triggers": map[string]any{"x": "1"}}}),
		instanceResource("null_resource", "gone", map[string]any{"attributes": map[string]any{"id": "2"}}),
		instanceResource("random_password", "pw", map[string]any{"attributes": map[string]any{"result": "s3cret-old", "length": 16}}),
	))
	require.NoError(t, err)
	to, err := readStateResources(plainState(2,
		instanceResource("null_resource", "a", map[string]any{"attributes": map[string]any{"triggers": map[string]any{"x": "1"}, "id": "1"}}),
		instanceResource("random_password", "pw", map[string]any{"attributes": map[string]any{"result": "s3cret-new", "length": 16}}),
		instanceResource("emu_machine", "cp", map[string]any{"index_key": "cp-0", "attributes": map[string]any{"id": "m"}}),
	))
	require.NoError(t, err)
	d := diffStateResources(from, to)
	require.Equal(t, []string{`emu_machine.cp["cp-0"]`}, d.Added)
	require.Equal(t, []string{"null_resource.gone"}, d.Removed)
	require.Equal(t, []stateChange{{Address: "random_password.pw", Attributes: []string{"result"}}}, d.Changed,
		"key order is no change; a changed value is named, never shown")

	enc, err := readStateResources([]byte(`{"serial":3,"lineage":"l","encryption_version":"v0","encrypted_data":"AAAA"}`))
	require.NoError(t, err)
	require.True(t, enc.Encrypted)
	require.Empty(t, enc.Instances)
}

// The state page lists the kept versions and the lock holder; an admin gets
// force-unlock (which releases the lock through the API), an editor sees the
// lock but no control (and the API refuses the POST anyway), a viewer is
// refused by the API. A diff names added, removed and changed addresses and
// the changed attributes, never a value; encrypted versions compare by
// metadata only.
func TestStatePage(t *testing.T) {
	var store *eventstore.StateStore
	s := newUIStack(t, withStateStore(t, &store))
	s.create("/tenants", map[string]any{"apiVersion": domain.APIVersion, "kind": "Tenant",
		"metadata": map[string]any{"name": "acme"}, "spec": map[string]any{}})
	ctx := context.Background()

	admin := s.signIn("ad", domain.RoleAdmin)
	ed := s.signIn("ed", domain.RoleEdit)
	vi := s.signIn("vi", domain.RoleView)

	p := admin.get("/ui/tenants/acme/state")
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	require.Contains(t, p.Body, `data-testid="state-no-versions"`)
	require.Contains(t, p.Body, `data-testid="state-unlocked"`)

	v1, err := store.Put(ctx, "acme", "", eventstore.LockOwner{}, plainState(1,
		instanceResource("null_resource", "a", map[string]any{"attributes": map[string]any{"id": "1", "token": "hunter2"}})))
	require.NoError(t, err)
	v2, err := store.Put(ctx, "acme", "", eventstore.LockOwner{}, plainState(2,
		instanceResource("null_resource", "a", map[string]any{"attributes": map[string]any{"id": "1", "token": "hunter3"}}),
		instanceResource("null_resource", "b", map[string]any{"attributes": map[string]any{"id": "2"}})))
	require.NoError(t, err)
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	_, err = store.Lock(ctx, "acme", eventstore.LockInfo{ID: "lock-secret-id", Operation: "OperationTypeApply", Who: "runner@host", Created: created},
		eventstore.LockOwner{ApplyID: "apply-7", Credential: "cred-1"})
	require.NoError(t, err)

	p = admin.get("/ui/tenants/acme/state")
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	for _, w := range []string{`data-revision="` + revStr(v1.Revision) + `"`, `data-revision="` + revStr(v2.Revision) + `"`,
		`data-testid="state-lock-apply"`, "apply-7", "runner@host", "2026-01-02 03:04:05 UTC",
		`data-testid="state-force-unlock"`, `<label class="text-sm">`} {
		require.Contains(t, p.Body, w)
	}
	require.NotContains(t, p.Body, "lock-secret-id", "the lock ID lets one act under the lock: never shown")

	edPage := ed.get("/ui/tenants/acme/state")
	require.Equal(t, http.StatusOK, edPage.Code, edPage.Body)
	require.Contains(t, edPage.Body, "runner@host")
	require.NotContains(t, edPage.Body, `data-testid="state-force-unlock"`, "only admins get force-unlock")
	r := ed.form("/ui/tenants/acme/state/unlock", url.Values{})
	require.Equal(t, http.StatusForbidden, r.Code, r.Body)

	viPage := vi.get("/ui/tenants/acme/state")
	require.Equal(t, http.StatusForbidden, viPage.Code, "the API lets editors read state, not viewers")

	// The diff.
	d := admin.get("/ui/tenants/acme/state?from=" + revStr(v1.Revision) + "&to=" + revStr(v2.Revision))
	require.Equal(t, http.StatusOK, d.Code, d.Body)
	require.Contains(t, d.Body, `data-testid="state-diff-added"`)
	require.Contains(t, d.Body, "null_resource.b")
	require.Contains(t, d.Body, "null_resource.a: ")
	require.Contains(t, d.Body, `<span class="text-slate-600">token</span>`)
	require.NotContains(t, d.Body, "hunter", "attribute values are never shown")
	// Plain versions hold the tenant's keys: an editor's page does not
	// compare them (the API refuses their blobs to all but global admins).
	d = ed.get("/ui/tenants/acme/state?from=" + revStr(v1.Revision) + "&to=" + revStr(v2.Revision))
	require.Equal(t, http.StatusOK, d.Code, d.Body)
	require.Contains(t, d.Body, `data-testid="state-diff-plain"`)
	require.NotContains(t, d.Body, "null_resource.b")
	bad := admin.get("/ui/tenants/acme/state?from=999999&to=" + revStr(v2.Revision))
	require.Equal(t, http.StatusOK, bad.Code)
	require.Contains(t, bad.Body, "not a kept version")

	v3, err := store.Put(ctx, "acme", "lock-secret-id", eventstore.LockOwner{ApplyID: "apply-7", Credential: "cred-1"},
		[]byte(`{"serial":3,"lineage":"lin-1","encryption_version":"v0","encrypted_data":"AAAA","meta":{}}`))
	require.NoError(t, err)
	d = admin.get("/ui/tenants/acme/state?from=" + revStr(v2.Revision) + "&to=" + revStr(v3.Revision))
	require.Equal(t, http.StatusOK, d.Code, d.Body)
	require.Contains(t, d.Body, `data-testid="state-diff-encrypted"`)

	// The lock and the versions are live: a version written while the page
	// is open shows with the next event of the tenant (here a label).
	page := admin.get("/ui/tenants/acme/state")
	seen := regexp.MustCompile(`sse-connect="/ui/live/tenants/acme/state\?seen=([^"]+)"`).FindStringSubmatch(page.Body)
	require.NotNil(t, seen, "the page opens its live stream with what it shows")
	var v4 eventstore.StateVersion
	got := admin.liveEventsHook("/ui/live/tenants/acme/state?seen="+seen[1], 10*time.Second, func() {
		v4, err = store.Put(ctx, "acme", "lock-secret-id", eventstore.LockOwner{ApplyID: "apply-7", Credential: "cred-1"}, plainState(4))
		require.NoError(t, err)
		s.apiCall(http.MethodPatch, "/tenants/acme", map[string]any{"metadata": map[string]any{"labels": map[string]string{"touched": "yes"}}}, nil)
	}, func(event, data string) bool {
		require.NotEqual(t, "state-lock", event, "the lock did not change: not sent again")
		return event == "state-versions" && strings.Contains(data, `data-revision="`+revStr(v4.Revision)+`"`)
	})
	require.True(t, got, "the new version arrives live")

	// Force-unlock as admin.
	admin.get("/ui/tenants/acme/state")
	r = admin.form("/ui/tenants/acme/state/unlock", url.Values{})
	require.Equal(t, http.StatusSeeOther, r.Code, r.Body)
	_, _, held, err := store.LockHolder(ctx, "acme")
	require.NoError(t, err)
	require.False(t, held)
	p = admin.get("/ui/tenants/acme/state")
	require.Contains(t, p.Body, `data-testid="state-unlocked"`)
	require.False(t, strings.Contains(p.Body, `data-testid="state-force-unlock"`))
}

func revStr(n uint64) string { return strconv.FormatUint(n, 10) }
