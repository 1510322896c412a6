package handlers_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
)

// stateStack is the server with the state store and an audit log wired.
type stateStack struct {
	*stack
	state *eventstore.StateStore
	audit *eventstore.AuditLog
}

func newStateStack(t *testing.T, mutate ...func(*handlers.Config)) *stateStack {
	t.Helper()
	s := newStack(t).withProvider()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := eventstore.OpenStateStore(ctx, s.env.Store)
	require.NoError(t, err)
	audit, err := eventstore.OpenAudit(ctx, s.env.Store, eventstore.AuditConfig{})
	require.NoError(t, err)
	cfg := handlers.Config{}
	for _, m := range mutate {
		m(&cfg)
	}
	s.srv.Close()
	s.api.StopWatches()
	s.api = handlers.New(cfg, handlers.Deps{Store: s.env.Store, Cache: s.cache, Projector: s.projector,
		Identity: s.identity, Audit: audit, State: st})
	s.srv = httptest.NewServer(s.api.Handler())
	return &stateStack{stack: s, state: st, audit: audit}
}

// creds issues apply credentials for tenant valid for an hour.
func (s *stateStack) creds(tenant, applyID string) (string, string) {
	s.t.Helper()
	u, p, err := s.identity.IssueStateCredentials(context.Background(), tenant, applyID, time.Hour)
	require.NoError(s.t, err)
	return u, p
}

func basic(user, pass string) []string {
	return []string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))}
}

func md5Header(b []byte) []string {
	sum := md5.Sum(b)
	return []string{"Content-MD5", base64.StdEncoding.EncodeToString(sum[:])}
}

func lockBody(id, who string) string {
	return fmt.Sprintf(`{"ID":%q,"Operation":"OperationTypeApply","Info":"","Who":%q,"Version":"1.10.10","Created":"2025-06-01T10:00:00Z","Path":""}`, id, who)
}

func tfState(serial int, extra string) string {
	return fmt.Sprintf(`{"version":4,"terraform_version":"1.10.10","serial":%d,"lineage":"lin","outputs":{},"resources":[]%s}`, serial, extra)
}

// requireStatus checks that a response is a Status with the code and reason.
func requireStatus(t *testing.T, r response, code int, reason domain.Reason) domain.Status {
	t.Helper()
	require.Equal(t, code, r.Code, string(r.Body))
	st := r.status(t)
	require.Equal(t, "Status", st.Kind, string(r.Body))
	require.Equal(t, "Failure", st.Status)
	require.Equal(t, code, st.Code)
	require.Equal(t, reason, st.Reason)
	return st
}

// TestStateBackendAuth walks the credentials a backend request may carry.
func TestStateBackendAuth(t *testing.T) {
	s := newStateStack(t)
	s.createUser("alice", domain.RoleAdmin, alicePassword)
	session := s.sessionToken("alice", alicePassword)
	user, pass := s.creds("acme", "apply-1")
	_, otherPass := s.creds("globex", "apply-2")
	_, soonPass, err := s.identity.IssueStateCredentials(context.Background(), "acme", "apply-3", time.Minute)
	require.NoError(t, err)
	// Tamper with the claims (another tenant) but keep the signature.
	parts := strings.Split(pass, ".")
	forgedClaims, err := json.Marshal(map[string]any{"t": "globex", "a": "apply-1", "e": time.Now().Add(time.Hour).Unix()})
	require.NoError(t, err)
	forged := parts[0] + "." + base64.RawURLEncoding.EncodeToString(forgedClaims) + "." + parts[2]

	for _, tc := range []struct {
		name    string
		headers []string
		code    int
		reason  domain.Reason
	}{
		{"no credentials", []string{"Authorization", ""}, 401, domain.ReasonUnauthorized},
		{"the static admin token", bearer(testToken), 401, domain.ReasonUnauthorized},
		{"an admin's session", bearer(session), 401, domain.ReasonUnauthorized},
		{"an admin's password", basic("alice", alicePassword), 401, domain.ReasonUnauthorized},
		{"wrong user name", basic("admin", pass), 401, domain.ReasonUnauthorized},
		{"garbage password", basic(user, "not-a-token"), 401, domain.ReasonUnauthorized},
		{"forged claims", basic(user, forged), 401, domain.ReasonUnauthorized},
		{"truncated signature", basic(user, pass[:len(pass)-2]), 401, domain.ReasonUnauthorized},
		{"another tenant's credentials", basic(user, otherPass), 403, domain.ReasonForbidden},
		{"good credentials", basic(user, pass), 204, ""},
		{"good short-lived credentials", basic(user, soonPass), 204, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(http.MethodGet, "/tfstate/acme", nil, tc.headers...)
			if tc.reason == "" {
				require.Equal(t, tc.code, r.Code, string(r.Body))
				return
			}
			requireStatus(t, r, tc.code, tc.reason)
			if tc.code == 401 {
				require.Equal(t, `Basic realm="rezuscloud-tfstate"`, r.Header.Get("WWW-Authenticate"))
			}
		})
	}

	// Expiry is enforced by the identity service's clock.
	s.clock.Set(time.Now().Add(2 * time.Minute))
	requireStatus(t, s.do(http.MethodGet, "/tfstate/acme", nil, basic(user, soonPass)...), 401, domain.ReasonUnauthorized)
	require.Equal(t, 204, s.do(http.MethodGet, "/tfstate/acme", nil, basic(user, pass)...).Code)
	s.clock.Set(time.Now().Add(2 * time.Hour))
	requireStatus(t, s.do(http.MethodGet, "/tfstate/acme", nil, basic(user, pass)...), 401, domain.ReasonUnauthorized)
}

func TestIssueStateCredentialsRefusesBadInput(t *testing.T) {
	s := newStack(t)
	for _, tc := range []struct {
		name, tenant, apply string
		ttl                 time.Duration
	}{
		{"bad tenant", "Not.A.Name", "a", time.Hour},
		{"no apply", "acme", "", time.Hour},
		{"long apply", "acme", strings.Repeat("a", 257), time.Hour},
		{"no lifetime", "acme", "a", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := s.identity.IssueStateCredentials(context.Background(), tc.tenant, tc.apply, tc.ttl)
			require.Equal(t, domain.ReasonBadRequest, domain.ReasonOf(err))
		})
	}
}

// TestStateBackendProtocol runs the requests tofu's http backend makes, in
// order, against one tenant's state.
func TestStateBackendProtocol(t *testing.T) {
	s := newStateStack(t)
	user, pass := s.creds("acme", "apply-1")
	auth := basic(user, pass)
	state1, state2 := tfState(1, ""), tfState(2, `,"check_results":null`)
	type step struct {
		name    string
		method  string
		path    string
		body    string
		headers []string
		code    int
		// reason, when set, wants a Status with it.
		reason domain.Reason
		// holder, when set, wants the holder's LockInfo in the body.
		holder string
		// body, when set, wants the response body.
		want string
	}
	steps := []step{
		{name: "no state yet", method: "GET", path: "/tfstate/acme", code: 204},
		{name: "lock", method: "LOCK", path: "/tfstate/acme/lock", body: lockBody("lock-a", "runner@a"), code: 200},
		{name: "second locker sees the holder", method: "LOCK", path: "/tfstate/acme/lock", body: lockBody("lock-b", "runner@b"),
			code: 423, reason: domain.ReasonConflict, holder: "lock-a"},
		{name: "write without the lock ID", method: "POST", path: "/tfstate/acme", body: state1, code: 423,
			reason: domain.ReasonConflict, holder: "lock-a"},
		{name: "write with another lock ID", method: "POST", path: "/tfstate/acme?ID=lock-b", body: state1, code: 423,
			reason: domain.ReasonConflict, holder: "lock-a"},
		{name: "write with a wrong Content-MD5", method: "POST", path: "/tfstate/acme?ID=lock-a", body: state1,
			headers: md5Header([]byte(state2)), code: 400, reason: domain.ReasonBadRequest},
		{name: "write with a malformed Content-MD5", method: "POST", path: "/tfstate/acme?ID=lock-a", body: state1,
			headers: []string{"Content-MD5", "nope"}, code: 400, reason: domain.ReasonBadRequest},
		{name: "write that is not JSON", method: "POST", path: "/tfstate/acme?ID=lock-a", body: "plain text",
			code: 400, reason: domain.ReasonBadRequest},
		{name: "write as the holder", method: "POST", path: "/tfstate/acme?ID=lock-a", body: state1,
			headers: md5Header([]byte(state1)), code: 200},
		{name: "read it back", method: "GET", path: "/tfstate/acme", code: 200, want: state1},
		{name: "unlock with another ID", method: "UNLOCK", path: "/tfstate/acme/lock", body: lockBody("lock-b", ""),
			code: 409, reason: domain.ReasonConflict, holder: "lock-a"},
		{name: "unlock without an ID", method: "UNLOCK", path: "/tfstate/acme/lock", body: `{"ID":""}`,
			code: 400, reason: domain.ReasonBadRequest},
		{name: "unlock with broken JSON", method: "UNLOCK", path: "/tfstate/acme/lock", body: `{"ID":`,
			code: 400, reason: domain.ReasonBadRequest},
		{name: "unlock", method: "UNLOCK", path: "/tfstate/acme/lock", body: lockBody("lock-a", ""), code: 200},
		{name: "unlock again (a retried release)", method: "UNLOCK", path: "/tfstate/acme/lock", body: `{"ID":"lock-a"}`, code: 200},
		{name: "unlocked: a write with a stale ID is accepted", method: "POST", path: "/tfstate/acme?ID=lock-a", body: state2, code: 200},
		{name: "read the new version", method: "GET", path: "/tfstate/acme", code: 200, want: state2},
		{name: "lock with POST (lock_method = POST)", method: "POST", path: "/tfstate/acme/lock", body: lockBody("lock-c", "runner@c"), code: 200},
		{name: "LOCK sees the POST lock", method: "LOCK", path: "/tfstate/acme/lock", body: lockBody("lock-d", ""),
			code: 423, reason: domain.ReasonConflict, holder: "lock-c"},
		{name: "delete while locked by another", method: "DELETE", path: "/tfstate/acme?ID=lock-d", code: 423,
			reason: domain.ReasonConflict, holder: "lock-c"},
		{name: "unlock with DELETE (unlock_method = DELETE)", method: "DELETE", path: "/tfstate/acme/lock", body: `{"ID":"lock-c"}`, code: 200},
		{name: "delete", method: "DELETE", path: "/tfstate/acme", code: 200},
		{name: "gone", method: "GET", path: "/tfstate/acme", code: 204},
		{name: "a method the backend does not serve", method: "PUT", path: "/tfstate/acme", body: state1,
			code: 405, reason: domain.ReasonMethodNotAllowed},
		{name: "lock info too large", method: "LOCK", path: "/tfstate/acme/lock", body: `{"ID":"x","Info":"` + strings.Repeat("i", 70<<10) + `"}`,
			code: 413, reason: domain.ReasonRequestEntityTooLarge},
	}
	for i, st := range steps {
		t.Run(fmt.Sprintf("%02d %s", i, st.name), func(t *testing.T) {
			var body any
			if st.body != "" {
				body = st.body
			}
			r := s.do(st.method, st.path, body, append(append([]string{}, auth...), st.headers...)...)
			if st.reason != "" {
				requireStatus(t, r, st.code, st.reason)
			} else {
				require.Equal(t, st.code, r.Code, string(r.Body))
			}
			if st.holder != "" {
				var info struct {
					Who, Operation string
					ApplyID        string `json:"applyID"`
					Message        string `json:"message"`
				}
				require.NoError(t, json.Unmarshal(r.Body, &info))
				require.Equal(t, "OperationTypeApply", info.Operation, "tofu reads the holder's LockInfo from the body")
				require.Equal(t, "apply-1", info.ApplyID)
				require.Contains(t, info.Message, "apply-1")
				require.NotContains(t, string(r.Body), st.holder, "but not the lock ID")
			}
			if st.want != "" {
				require.Equal(t, st.want, string(r.Body))
				require.Equal(t, "application/json", r.Header.Get("Content-Type"))
				require.Equal(t, md5Header([]byte(st.want))[1], r.Header.Get("Content-MD5"))
			}
		})
	}
}

// TestStateBackendBodyLimit: 32 MiB is stored, one byte more is 413.
func TestStateBackendBodyLimit(t *testing.T) {
	s := newStateStack(t)
	auth := basic(s.creds("acme", "apply-1"))
	head := tfState(1, `,"pad":"`)
	big := head + strings.Repeat("a", eventstore.MaxStateSize-len(head)-2) + `"}`
	require.Len(t, big, eventstore.MaxStateSize)
	r := s.do(http.MethodPost, "/tfstate/acme", big, auth...)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	r = s.do(http.MethodGet, "/tfstate/acme", nil, auth...)
	require.Equal(t, http.StatusOK, r.Code)
	require.True(t, bytes.Equal([]byte(big), r.Body), "the 32 MiB state comes back whole")

	requireStatus(t, s.do(http.MethodPost, "/tfstate/acme", big+" ", auth...), 413, domain.ReasonRequestEntityTooLarge)
	// Without a Content-Length the limit still holds.
	req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/tfstate/acme", struct{ *strings.Reader }{strings.NewReader(big + " ")})
	require.NoError(t, err)
	req.Header.Set("Authorization", auth[1])
	req.Header.Set("Content-Type", "application/json") // as tofu sends it
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
}

func TestStateBackendRequireEncrypted(t *testing.T) {
	s := newStateStack(t, func(c *handlers.Config) { c.RequireEncryptedState = true })
	auth := basic(s.creds("acme", "apply-1"))
	requireStatus(t, s.do(http.MethodPost, "/tfstate/acme", tfState(1, ""), auth...), 400, domain.ReasonBadRequest)
	enc := `{"serial":1,"lineage":"lin","meta":{"key_provider.pbkdf2.rezus":"e30="},"encrypted_data":"AAAA","encryption_version":"v0"}`
	require.Equal(t, 200, s.do(http.MethodPost, "/tfstate/acme", enc, auth...).Code)
}

// TestStateAPI covers what users see: the state, its versions and the
// lock, per role, and the audited force-unlock.
func TestStateAPI(t *testing.T) {
	s := newStateStack(t)
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))
	tokens := map[string]string{}
	for _, role := range []string{domain.RoleView, domain.RoleEdit, domain.RoleAdmin} {
		s.createUser("u-"+role, role, "password for "+role+" user")
		tokens[role] = s.sessionToken("u-"+role, "password for "+role+" user")
	}
	as := func(role string) []string { return bearer(tokens[role]) }

	requireStatus(t, s.do(http.MethodGet, "/api/v1/tenants/acme/state", nil, as(domain.RoleEdit)...), 404, domain.ReasonNotFound)
	r := s.do(http.MethodGet, "/api/v1/tenants/acme/state/versions", nil, as(domain.RoleEdit)...)
	require.Equal(t, 200, r.Code, string(r.Body))
	require.JSONEq(t, `{"apiVersion":"rezuscloud.io/v1","kind":"TerraformStateVersionList","tenant":"acme","items":[]}`, string(r.Body))

	auth := basic(s.creds("acme", "apply-7"))
	require.Equal(t, 200, s.do(http.MethodPost, "/tfstate/acme", tfState(1, ""), auth...).Code)
	require.Equal(t, 200, s.do("LOCK", "/tfstate/acme/lock", lockBody("lock-a", "runner@a"), auth...).Code)
	require.Equal(t, 200, s.do(http.MethodPost, "/tfstate/acme?ID=lock-a", tfState(2, ""), auth...).Code)

	// Reading state: edit and admin, not view; a plain version (it holds the
	// machine configs with the tenant's keys) only global admins.
	requireStatus(t, s.do(http.MethodGet, "/api/v1/tenants/acme/state", nil, as(domain.RoleView)...), 403, domain.ReasonForbidden)
	requireStatus(t, s.do(http.MethodGet, "/api/v1/tenants/acme/state/versions", nil, as(domain.RoleView)...), 403, domain.ReasonForbidden)
	requireStatus(t, s.do(http.MethodGet, "/api/v1/tenants/acme/state", nil, as(domain.RoleEdit)...), 403, domain.ReasonForbidden)
	r = s.do(http.MethodGet, "/api/v1/tenants/acme/state", nil, as(domain.RoleAdmin)...)
	require.Equal(t, 200, r.Code, string(r.Body))
	require.Equal(t, tfState(2, ""), string(r.Body))
	require.Equal(t, "2", r.Header.Get("Rezus-State-Serial"))
	require.Equal(t, "lin", r.Header.Get("Rezus-State-Lineage"))
	require.Equal(t, "false", r.Header.Get("Rezus-State-Encrypted"))
	require.Equal(t, md5Header([]byte(tfState(2, "")))[1], r.Header.Get("Content-MD5"))

	r = s.do(http.MethodGet, "/api/v1/tenants/acme/state/versions", nil, as(domain.RoleEdit)...)
	require.Equal(t, 200, r.Code, string(r.Body))
	var list struct {
		Kind string `json:"kind"`
		Lock *struct {
			ApplyID string              `json:"applyID"`
			Info    eventstore.LockInfo `json:"info"`
		} `json:"lock"`
		Items []eventstore.StateVersion `json:"items"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &list))
	require.Len(t, list.Items, 2)
	require.Equal(t, []uint64{2, 1}, []uint64{list.Items[0].Serial, list.Items[1].Serial}, "newest first")
	require.NotNil(t, list.Lock)
	require.Equal(t, "apply-7", list.Lock.ApplyID)
	require.Equal(t, "lock-a", list.Lock.Info.ID)

	r = s.do(http.MethodGet, fmt.Sprintf("/api/v1/tenants/acme/state?revision=%d", list.Items[1].Revision), nil, as(domain.RoleAdmin)...)
	require.Equal(t, 200, r.Code, string(r.Body))
	require.Equal(t, tfState(1, ""), string(r.Body), "an older kept version")
	requireStatus(t, s.do(http.MethodGet, fmt.Sprintf("/api/v1/tenants/acme/state?revision=%d", list.Items[1].Revision), nil, as(domain.RoleEdit)...),
		403, domain.ReasonForbidden)

	// An encrypted version is ciphertext under a key only the server holds: editors read it.
	encrypted := tfState(3, `,"encryption_version":"v0","encrypted_data":"c2VhbGVk","meta":{}`)
	require.Equal(t, 200, s.do(http.MethodPost, "/tfstate/acme?ID=lock-a", encrypted, auth...).Code)
	r = s.do(http.MethodGet, "/api/v1/tenants/acme/state", nil, as(domain.RoleEdit)...)
	require.Equal(t, 200, r.Code, string(r.Body))
	require.Equal(t, encrypted, string(r.Body))
	requireStatus(t, s.do(http.MethodGet, "/api/v1/tenants/acme/state?revision=x", nil, as(domain.RoleEdit)...), 400, domain.ReasonBadRequest)
	requireStatus(t, s.do(http.MethodGet, "/api/v1/tenants/acme/state?revision=99999", nil, as(domain.RoleEdit)...), 404, domain.ReasonNotFound)

	// Force-unlock: admin only, audited with the released lock.
	requireStatus(t, s.do(http.MethodDelete, "/api/v1/tenants/acme/state/lock", nil, as(domain.RoleEdit)...), 403, domain.ReasonForbidden)
	r = s.do(http.MethodDelete, "/api/v1/tenants/acme/state/lock", nil, as(domain.RoleAdmin)...)
	require.Equal(t, 200, r.Code, string(r.Body))
	var released struct {
		Released struct {
			ApplyID string              `json:"applyID"`
			Info    eventstore.LockInfo `json:"info"`
		} `json:"released"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &released))
	require.Equal(t, "apply-7", released.Released.ApplyID)
	require.Equal(t, "lock-a", released.Released.Info.ID)
	requireStatus(t, s.do(http.MethodDelete, "/api/v1/tenants/acme/state/lock", nil, as(domain.RoleAdmin)...), 404, domain.ReasonNotFound)
	require.Equal(t, 200, s.do("LOCK", "/tfstate/acme/lock", lockBody("lock-b", "runner@b"), auth...).Code, "the lock is free again")

	var unlock eventstore.AuditRecord
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		recs, _, err := s.audit.Query(context.Background(), eventstore.AuditQuery{Limit: 1000, Tenant: "acme"})
		require.NoError(c, err)
		i := slices.IndexFunc(recs, func(rec eventstore.AuditRecord) bool {
			return rec.Method == http.MethodDelete && rec.Path == "/api/v1/tenants/acme/state/lock" && rec.Code == 200
		})
		require.GreaterOrEqual(c, i, 0, "no audit record of the unlock")
		unlock = recs[i]
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, "u-admin", unlock.Actor)
	require.Equal(t, "TerraformStateLock", unlock.Kind)
	require.Contains(t, unlock.Detail, "lock-a")
	require.Contains(t, unlock.Detail, "apply-7")
	require.Contains(t, unlock.Detail, "runner@a")

	// The backend's writes and users' reads of state are audited too.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		recs, _, err := s.audit.Query(context.Background(), eventstore.AuditQuery{Limit: 1000, Tenant: "acme"})
		require.NoError(c, err)
		var post, read bool
		for _, rec := range recs {
			post = post || (rec.Method == http.MethodPost && rec.Path == "/tfstate/acme" && rec.Actor == "apply:apply-7")
			read = read || (rec.Method == http.MethodGet && rec.Path == "/api/v1/tenants/acme/state" && rec.Actor == "u-edit" && rec.Code == 200)
		}
		assert.True(c, post, "the backend's write is audited")
		assert.True(c, read, "the user's read is audited")
	}, 10*time.Second, 5*time.Millisecond)
}

// Without a state store the routes say so instead of failing.
func TestStateRoutesWithoutStore(t *testing.T) {
	s := newStack(t)
	user, pass, err := s.identity.IssueStateCredentials(context.Background(), "acme", "a", time.Hour)
	require.NoError(t, err)
	requireStatus(t, s.do(http.MethodGet, "/tfstate/acme", nil, basic(user, pass)...), 503, domain.ReasonServiceUnavailable)
	requireStatus(t, s.do(http.MethodGet, "/api/v1/tenants/acme/state", nil), 503, domain.ReasonServiceUnavailable)
}

// TestStateLockBoundToCredentials: a state lock belongs to the apply
// credentials that took it. Other still-valid credentials of the same tenant
// (another apply's, or other credentials of the same apply) neither write,
// delete, re-take nor release it, even with its ID; the 423 and 409 answers
// do not tell them the ID; and credentials end when their apply does.
func TestStateLockBoundToCredentials(t *testing.T) {
	s := newStateStack(t)
	ctx := context.Background()
	holder := basic(s.creds("acme", "apply-1"))
	state1 := tfState(1, "")
	require.Equal(t, 200, s.do("LOCK", "/tfstate/acme/lock", lockBody("lock-a", "runner@a"), holder...).Code)
	require.Equal(t, 200, s.do(http.MethodPost, "/tfstate/acme?ID=lock-a", state1, holder...).Code)

	attackers := []struct {
		name string
		auth []string
	}{
		{"another apply's credentials", basic(s.creds("acme", "apply-2"))},
		{"other credentials of the same apply", basic(s.creds("acme", "apply-1"))},
	}
	attacks := []struct {
		name, method, path, body string
		code                     int
	}{
		{"write under the lock with its ID", http.MethodPost, "/tfstate/acme?ID=lock-a", tfState(2, ""), 423},
		{"delete under the lock with its ID", http.MethodDelete, "/tfstate/acme?ID=lock-a", "", 423},
		{"unlock it with its ID", "UNLOCK", "/tfstate/acme/lock", lockBody("lock-a", ""), 409},
		{"unlock it with DELETE", http.MethodDelete, "/tfstate/acme/lock", `{"ID":"lock-a"}`, 409},
		{"take it again by its ID", "LOCK", "/tfstate/acme/lock", lockBody("lock-a", "thief"), 423},
		{"take it again with POST", http.MethodPost, "/tfstate/acme/lock", lockBody("lock-a", "thief"), 423},
	}
	for _, who := range attackers {
		for _, tc := range attacks {
			t.Run(who.name+": "+tc.name, func(t *testing.T) {
				var body any
				if tc.body != "" {
					body = tc.body
				}
				r := s.do(tc.method, tc.path, body, who.auth...)
				requireStatus(t, r, tc.code, domain.ReasonConflict)
				require.NotContains(t, string(r.Body), "lock-a", "the answer does not reveal the lock ID")
				var fields map[string]any
				require.NoError(t, json.Unmarshal(r.Body, &fields))
				require.NotContains(t, fields, "ID")
				require.Equal(t, "runner@a", fields["Who"], "it says who holds the lock")
				require.Equal(t, "OperationTypeApply", fields["Operation"])
				require.Equal(t, "2025-06-01T10:00:00Z", fields["Created"])
			})
		}
	}
	st, err := s.state.Get(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, state1, string(st.Data), "no attack changed the state")
	applyID, info, locked, err := s.state.LockHolder(ctx, "acme")
	require.NoError(t, err)
	require.True(t, locked, "no attack released the lock")
	require.Equal(t, "apply-1", applyID)
	require.Equal(t, "lock-a", info.ID)
	require.Equal(t, "runner@a", info.Who, "nor took it over")

	// The holder's own credentials write under it and release it.
	require.Equal(t, 200, s.do(http.MethodPost, "/tfstate/acme?ID=lock-a", tfState(3, ""), holder...).Code)
	require.Equal(t, 200, s.do("UNLOCK", "/tfstate/acme/lock", lockBody("lock-a", ""), holder...).Code)

	// Credentials end with their apply: revoked ones are 401 on every
	// route, even while their lock is held; others stay good.
	user, pass := s.creds("acme", "apply-4")
	ended := basic(user, pass)
	require.Equal(t, 200, s.do("LOCK", "/tfstate/acme/lock", lockBody("lock-d", "runner@d"), ended...).Code)
	require.NoError(t, s.identity.RevokeStateCredentials(ctx, user, pass))
	require.NoError(t, s.identity.RevokeStateCredentials(ctx, user, pass), "revoking twice is not an error")
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodGet, "/tfstate/acme", ""},
		{http.MethodPost, "/tfstate/acme?ID=lock-d", tfState(4, "")},
		{http.MethodDelete, "/tfstate/acme?ID=lock-d", ""},
		{"LOCK", "/tfstate/acme/lock", lockBody("lock-e", "")},
		{"UNLOCK", "/tfstate/acme/lock", lockBody("lock-d", "")},
	} {
		t.Run("after its apply ended: "+tc.method+" "+tc.path, func(t *testing.T) {
			var body any
			if tc.body != "" {
				body = tc.body
			}
			r := s.do(tc.method, tc.path, body, ended...)
			requireStatus(t, r, 401, domain.ReasonUnauthorized)
			require.Contains(t, r.status(t).Message, "revoked")
		})
	}
	_, _, locked, err = s.state.LockHolder(ctx, "acme")
	require.NoError(t, err)
	require.True(t, locked, "the ended apply's lock waits for a force-unlock")
	require.Equal(t, 200, s.do(http.MethodGet, "/tfstate/acme", nil, holder...).Code, "other credentials are not revoked")
	require.Equal(t, 200, s.do(http.MethodDelete, "/api/v1/tenants/acme/state/lock", nil).Code, "an admin force-unlocks it")
	require.Equal(t, 200, s.do("LOCK", "/tfstate/acme/lock", lockBody("lock-f", ""), holder...).Code)
}
