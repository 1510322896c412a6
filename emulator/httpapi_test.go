package emulator

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestHTTPAPI(t *testing.T) {
	t.Parallel()
	em, _ := startEmulator(t, Config{Addressing: AddressingPorts})
	srv := httptest.NewServer(authorized(em))
	t.Cleanup(srv.Close)

	call := func(method, path string, body any, want int, out any) {
		t.Helper()
		var rd *bytes.Reader
		if body != nil {
			b, err := json.Marshal(body)
			require.NoError(t, err)
			rd = bytes.NewReader(b)
		} else {
			rd = bytes.NewReader(nil)
		}
		req, err := http.NewRequest(method, srv.URL+path, rd)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, "%s %s", method, path)
		if out != nil {
			require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
		}
	}

	var created NodeStatus
	call(http.MethodPost, "/v1/nodes", NodeSpec{Name: "n1", Cluster: "c"}, http.StatusCreated, &created)
	require.Equal(t, PhaseMaintenance, created.Phase)
	require.NotEmpty(t, created.Address)

	var st domain.Status
	call(http.MethodPost, "/v1/nodes", NodeSpec{Name: "n1"}, http.StatusConflict, &st)
	require.Equal(t, domain.ReasonAlreadyExists, st.Reason)
	call(http.MethodPost, "/v1/nodes", map[string]any{"name": "n2", "bogus": 1}, http.StatusBadRequest, &st)
	call(http.MethodPost, "/v1/nodes", NodeSpec{Name: "n2", UserData: []byte("machine: [")}, http.StatusUnprocessableEntity, &st)
	require.Equal(t, domain.ReasonInvalid, st.Reason)

	var list struct{ Items []NodeStatus }
	call(http.MethodGet, "/v1/nodes", nil, http.StatusOK, &list)
	require.Len(t, list.Items, 1)

	var faulted NodeStatus
	call(http.MethodPut, "/v1/nodes/n1/faults", Faults{Unhealthy: true, Unreachable: true}, http.StatusOK, &faulted)
	require.True(t, faulted.Faults.Unhealthy)
	require.Equal(t, PhaseUnreachable, faulted.Phase)
	call(http.MethodPut, "/v1/nodes/n1/faults", Faults{}, http.StatusOK, &faulted)
	require.Equal(t, PhaseMaintenance, faulted.Phase)

	call(http.MethodGet, "/v1/nodes/n1", nil, http.StatusOK, &created)
	call(http.MethodDelete, "/v1/nodes/n1", nil, http.StatusNoContent, nil)
	call(http.MethodGet, "/v1/nodes/n1", nil, http.StatusNotFound, &st)
	require.Equal(t, domain.ReasonNotFound, st.Reason)
	call(http.MethodDelete, "/v1/nodes/n1", nil, http.StatusNotFound, nil)
	call(http.MethodPut, "/v1/nodes/n1/faults", Faults{}, http.StatusNotFound, nil)

	// A cloud out of capacity: creates beyond maxNodes fail with a message
	// the autoscaler's error class reads as out of resources.
	var c Capacity
	call(http.MethodGet, "/v1/capacity", nil, http.StatusOK, &c)
	require.Zero(t, c.MaxNodes)
	call(http.MethodPut, "/v1/capacity", Capacity{MaxNodes: -1}, http.StatusUnprocessableEntity, &st)
	require.Equal(t, "maxNodes", st.Details.Causes[0].Field)
	call(http.MethodPut, "/v1/capacity", Capacity{MaxNodes: 1}, http.StatusOK, &c)
	require.Equal(t, 1, c.MaxNodes)
	call(http.MethodPost, "/v1/nodes", NodeSpec{Name: "n3", Cluster: "c"}, http.StatusCreated, &created)
	call(http.MethodPost, "/v1/nodes", NodeSpec{Name: "n4", Cluster: "c"}, http.StatusForbidden, &st)
	require.Contains(t, st.Message, "insufficient capacity")
	call(http.MethodGet, "/v1/nodes", nil, http.StatusOK, &list)
	require.Len(t, list.Items, 1, "the refused node was not made")
	call(http.MethodPut, "/v1/capacity", Capacity{}, http.StatusOK, &c)
	call(http.MethodPost, "/v1/nodes", NodeSpec{Name: "n4", Cluster: "c"}, http.StatusCreated, &created)
}

// TestHTTPEtcd drives a cluster's etcd through the HTTP API: keys (with a
// leading "/" escaped), revisions, padding, bad input, and the wipe.
func TestHTTPEtcd(t *testing.T) {
	t.Parallel()
	em, _ := startEmulator(t, fastConfig(""))
	srv := httptest.NewServer(authorized(em))
	t.Cleanup(srv.Close)
	cl := newTestCluster(t, "httpetcd")
	st := configuredNode(t, em, "cp-1", cl.controlPlane)
	base := "/v1/clusters/" + url.PathEscape(clusterOf(t, em, "cp-1")) + "/etcd"

	call := func(method, path, body string, want int) EtcdData {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, want, resp.StatusCode, "%s %s: %s", method, path, b)
		var d EtcdData
		if want == http.StatusOK {
			require.NoError(t, json.Unmarshal(b, &d))
		}
		return d
	}

	call(http.MethodGet, "/v1/clusters/nope/etcd", "", http.StatusNotFound)
	call(http.MethodDelete, "/v1/clusters/nope/etcd", "", http.StatusNotFound)
	require.False(t, call(http.MethodGet, base, "", http.StatusOK).Bootstrapped)
	call(http.MethodPut, base+"/keys/a", "1", http.StatusConflict) // not bootstrapped

	require.NoError(t, connect(t, cl.admin, st.Address).Bootstrap(callCtx(t), &machine.BootstrapRequest{}))
	call(http.MethodPut, base+"/keys/%2Fregistry%2Fpods%2Fx", "pod", http.StatusOK)
	call(http.MethodPut, base+"/keys/plain/nested", "v1", http.StatusOK)
	d := call(http.MethodPut, base+"/keys/plain/nested", "v2", http.StatusOK)
	require.Equal(t, int64(4), d.Revision)
	require.Equal(t, map[string]string{"/registry/pods/x": "pod", "plain/nested": "v2"}, d.Keys)
	d = call(http.MethodDelete, base+"/keys/plain/nested", "", http.StatusOK)
	require.Equal(t, int64(5), d.Revision)
	call(http.MethodDelete, base+"/keys/plain/nested", "", http.StatusNotFound)

	call(http.MethodPut, base+"/keys/", "v", http.StatusUnprocessableEntity)
	call(http.MethodPut, base+"/keys/big", strings.Repeat("x", maxEtcdValue+1), http.StatusUnprocessableEntity)
	call(http.MethodPut, base+"/keys/bin", "\xff\xfe", http.StatusUnprocessableEntity)
	call(http.MethodPut, base+"/padding?bytes=lots", "", http.StatusBadRequest)
	call(http.MethodPut, base+"/padding?bytes=-1", "", http.StatusUnprocessableEntity)
	call(http.MethodPut, base+"/padding?bytes=99999999999999", "", http.StatusUnprocessableEntity)
	d = call(http.MethodPut, base+"/padding?bytes=1000", "", http.StatusOK)
	require.Equal(t, int64(1000), d.Padding)
	require.Equal(t, int64(5), d.Revision, "padding is not a write")
	got := call(http.MethodGet, base, "", http.StatusOK)
	require.Equal(t, d, got)
	require.Greater(t, got.SnapshotSize, int64(1000))

	call(http.MethodDelete, base, "", http.StatusNoContent)
	require.Equal(t, EtcdData{Cluster: d.Cluster, Keys: map[string]string{}}, call(http.MethodGet, base, "", http.StatusOK))
	call(http.MethodPut, base+"/keys/a", "1", http.StatusConflict)
}

// TestHTTPAPIToken replays issue 42's finding 12: a local process without
// the API's token put a node unreachable through PUT /v1/nodes/{n}/faults,
// and remediation replaced the machine. Every /v1 route now answers 401
// without the token (and does nothing); the token is kept in the state dir
// (0600) and outlives a restart; the schematic routes stay open, as the
// public Image Factory's.
func TestHTTPAPIToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	em, stop := startEmulator(t, Config{Addressing: AddressingPorts, StateDir: dir})
	srv := httptest.NewServer(em.Handler())
	t.Cleanup(srv.Close)
	_, err := em.Create(t.Context(), NodeSpec{Name: "n1", Cluster: "c"})
	require.NoError(t, err)
	token := em.APIToken()
	require.Len(t, token, 64)

	call := func(method, path, auth, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	for _, auth := range []string{"", "Bearer", "Bearer " + token[:63], "Bearer " + token + "x", "Basic " + token, token, "Bearer  " + token} {
		for _, r := range []struct{ method, path, body string }{
			{http.MethodPut, "/v1/nodes/n1/faults", `{"unreachable":true,"unhealthy":true}`},
			{http.MethodGet, "/v1/nodes", ""},
			{http.MethodPost, "/v1/nodes", `{"name":"n2"}`},
			{http.MethodDelete, "/v1/nodes/n1", ""},
			{http.MethodPost, "/v1/addresses", `{"name":"a"}`},
			{http.MethodDelete, "/v1/clusters/c/etcd", ""},
			{http.MethodPut, "/v1/capacity", `{"maxNodes":1}`},
			{http.MethodGet, "/v1/", ""},
		} {
			code, body := call(r.method, r.path, auth, r.body)
			require.Equal(t, http.StatusUnauthorized, code, "%s %s with %q: %s", r.method, r.path, auth, body)
			require.Contains(t, body, `"reason":"Unauthorized"`)
		}
	}
	st, err := em.Get("n1")
	require.NoError(t, err)
	require.Equal(t, Faults{}, st.Faults, "no fault was injected")
	require.Equal(t, PhaseMaintenance, st.Phase)
	require.Len(t, em.List(), 1)

	code, body := call(http.MethodPut, "/v1/nodes/n1/faults", "Bearer "+token, `{"unhealthy":true}`)
	require.Equal(t, http.StatusOK, code, body)
	code, body = call(http.MethodGet, "/v1/nodes", "bearer "+token, "") // the scheme is case-insensitive (RFC 9110)
	require.Equal(t, http.StatusOK, code, body)
	code, body = call(http.MethodPost, "/schematics", "", `{"customization":{}}`)
	require.Equal(t, http.StatusCreated, code, body)

	fi, err := os.Stat(filepath.Join(dir, APITokenFile))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	stop()
	again, _ := startEmulator(t, Config{Addressing: AddressingPorts, StateDir: dir})
	require.Equal(t, token, again.APIToken(), "the token outlives a restart")
	other, _ := startEmulator(t, Config{Addressing: AddressingPorts})
	require.NotEqual(t, token, other.APIToken())
	given, _ := startEmulator(t, Config{Addressing: AddressingPorts, APIToken: "given"})
	require.Equal(t, "given", given.APIToken())
}
