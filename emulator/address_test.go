package emulator

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// apiCall sends one request to the emulator's HTTP API, requires the status
// code and decodes the answer into a map.
func apiCall(t *testing.T, url, method, path string, body any, want int) map[string]any {
	t.Helper()
	var rd *bytes.Reader
	if s, ok := body.(string); ok {
		rd = bytes.NewReader([]byte(s))
	} else {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url+path, rd)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	if resp.StatusCode != http.StatusNoContent {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out), "%s %s", method, path)
	}
	require.Equal(t, want, resp.StatusCode, "%s %s: %v", method, path, out)
	return out
}

// TestAddressReservations walks a reservation's life through the HTTP API:
// reserve, boot a node on it, the refusals around it, free it, release it.
func TestAddressReservations(t *testing.T) {
	t.Parallel()
	em, _ := startEmulator(t, Config{Addressing: AddressingLoopback})
	srv := httptest.NewServer(authorized(em))
	t.Cleanup(srv.Close)

	cp := apiCall(t, srv.URL, http.MethodPost, "/v1/addresses", AddressSpec{Name: "cp"}, http.StatusCreated)
	ip, _ := cp["address"].(string)
	require.NotNil(t, net.ParseIP(ip).To4(), "reserved address %v", cp)
	require.Equal(t, "cp", cp["name"])
	_, err := net.Listen("tcp", net.JoinHostPort(ip, "50000"))
	require.Error(t, err, "a reservation keeps its address bound")

	tests := []struct {
		name       string
		method     string
		path       string
		body       any
		wantCode   int
		wantReason domain.Reason
		wantField  string // a cause on this field
		wantInMsg  string // in the Status message
		check      func(t *testing.T, out map[string]any)
	}{
		{name: "duplicate reservation", method: http.MethodPost, path: "/v1/addresses", body: AddressSpec{Name: "cp"},
			wantCode: http.StatusConflict, wantReason: domain.ReasonAlreadyExists},
		{name: "bad reservation name", method: http.MethodPost, path: "/v1/addresses", body: AddressSpec{Name: "Not_A_Label"},
			wantCode: http.StatusUnprocessableEntity, wantReason: domain.ReasonInvalid, wantField: "name"},
		{name: "unknown field", method: http.MethodPost, path: "/v1/addresses", body: `{"name":"x","ip":"127.0.0.9"}`,
			wantCode: http.StatusBadRequest, wantReason: domain.ReasonBadRequest},
		{name: "get", method: http.MethodGet, path: "/v1/addresses/cp", wantCode: http.StatusOK,
			check: func(t *testing.T, out map[string]any) {
				require.Equal(t, ip, out["address"])
				require.Nil(t, out["node"])
			}},
		{name: "get missing", method: http.MethodGet, path: "/v1/addresses/nope", wantCode: http.StatusNotFound, wantReason: domain.ReasonNotFound},
		{name: "node on an unreserved address", method: http.MethodPost, path: "/v1/nodes", body: NodeSpec{Name: "stray", Address: "127.0.254.254"},
			wantCode: http.StatusUnprocessableEntity, wantReason: domain.ReasonInvalid, wantField: "address", wantInMsg: "127.0.254.254 is not a reserved address"},
		{name: "node on a malformed address", method: http.MethodPost, path: "/v1/nodes", body: NodeSpec{Name: "stray", Address: "cp"},
			wantCode: http.StatusUnprocessableEntity, wantReason: domain.ReasonInvalid, wantField: "address", wantInMsg: "not an IPv4 address"},
		{name: "node on the reserved address", method: http.MethodPost, path: "/v1/nodes", body: NodeSpec{Name: "cp-0", Address: ip},
			wantCode: http.StatusCreated,
			check: func(t *testing.T, out map[string]any) {
				require.Equal(t, net.JoinHostPort(ip, "50000"), out["address"])
				require.Equal(t, string(PhaseMaintenance), out["phase"])
			}},
		{name: "the reservation names its node", method: http.MethodGet, path: "/v1/addresses/cp", wantCode: http.StatusOK,
			check: func(t *testing.T, out map[string]any) { require.Equal(t, "cp-0", out["node"]) }},
		{name: "a second node on it", method: http.MethodPost, path: "/v1/nodes", body: NodeSpec{Name: "cp-1", Address: ip},
			wantCode: http.StatusConflict, wantReason: domain.ReasonConflict, wantInMsg: `in use by node "cp-0"`},
		{name: "release while in use", method: http.MethodDelete, path: "/v1/addresses/cp",
			wantCode: http.StatusConflict, wantReason: domain.ReasonConflict, wantInMsg: `in use by node "cp-0"`},
		{name: "a node without an address avoids reserved ones", method: http.MethodPost, path: "/v1/nodes", body: NodeSpec{Name: "w-0"},
			wantCode: http.StatusCreated,
			check: func(t *testing.T, out map[string]any) {
				require.NotEqual(t, net.JoinHostPort(ip, "50000"), out["address"])
			}},
		{name: "delete the node", method: http.MethodDelete, path: "/v1/nodes/cp-0", wantCode: http.StatusNoContent},
		{name: "the address is free again", method: http.MethodGet, path: "/v1/addresses/cp", wantCode: http.StatusOK,
			check: func(t *testing.T, out map[string]any) {
				require.Nil(t, out["node"])
				_, err := net.Listen("tcp", net.JoinHostPort(ip, "50000"))
				require.Error(t, err, "the reservation holds its address again")
			}},
		{name: "another node boots on it", method: http.MethodPost, path: "/v1/nodes", body: NodeSpec{Name: "cp-1", Address: ip},
			wantCode: http.StatusCreated,
			check: func(t *testing.T, out map[string]any) {
				require.Equal(t, net.JoinHostPort(ip, "50000"), out["address"])
			}},
		{name: "list", method: http.MethodGet, path: "/v1/addresses", wantCode: http.StatusOK,
			check: func(t *testing.T, out map[string]any) {
				require.Equal(t, []any{map[string]any{"name": "cp", "address": ip, "node": "cp-1"}}, out["items"])
			}},
		{name: "delete that node", method: http.MethodDelete, path: "/v1/nodes/cp-1", wantCode: http.StatusNoContent},
		{name: "release", method: http.MethodDelete, path: "/v1/addresses/cp", wantCode: http.StatusNoContent,
			check: func(t *testing.T, _ map[string]any) {
				l, err := net.Listen("tcp", net.JoinHostPort(ip, "50000"))
				require.NoError(t, err, "a released address is unbound")
				l.Close()
			}},
		{name: "release again", method: http.MethodDelete, path: "/v1/addresses/cp", wantCode: http.StatusNotFound, wantReason: domain.ReasonNotFound},
		{name: "node on a released address", method: http.MethodPost, path: "/v1/nodes", body: NodeSpec{Name: "cp-2", Address: ip},
			wantCode: http.StatusUnprocessableEntity, wantReason: domain.ReasonInvalid, wantField: "address"},
	}
	for _, tt := range tests { // in order: each step builds on the last
		t.Run(tt.name, func(t *testing.T) {
			out := apiCall(t, srv.URL, tt.method, tt.path, tt.body, tt.wantCode)
			if tt.wantReason != "" {
				require.Equal(t, string(tt.wantReason), out["reason"], "%v", out)
			}
			if tt.wantInMsg != "" {
				require.Contains(t, out["message"], tt.wantInMsg)
			}
			if tt.wantField != "" {
				var fields []string
				details, _ := out["details"].(map[string]any)
				causes, _ := details["causes"].([]any)
				for _, c := range causes {
					fields = append(fields, c.(map[string]any)["field"].(string))
				}
				require.Contains(t, fields, tt.wantField, "%v", out)
			}
			if tt.check != nil {
				tt.check(t, out)
			}
		})
	}
}

// TestAddressesNeedLoopback: in ports mode nodes share one IP, so there is
// nothing to reserve; both ways in say why.
func TestAddressesNeedLoopback(t *testing.T) {
	t.Parallel()
	em, _ := startEmulator(t, Config{Addressing: AddressingPorts})
	srv := httptest.NewServer(authorized(em))
	t.Cleanup(srv.Close)

	tests := []struct {
		name       string
		path       string
		body       any
		wantCode   int
		wantReason domain.Reason
	}{
		{"reserve", "/v1/addresses", AddressSpec{Name: "cp"}, http.StatusForbidden, domain.ReasonForbidden},
		{"boot on an address", "/v1/nodes", NodeSpec{Name: "cp-0", Address: "127.0.1.1"}, http.StatusUnprocessableEntity, domain.ReasonInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := apiCall(t, srv.URL, http.MethodPost, tt.path, tt.body, tt.wantCode)
			require.Equal(t, string(tt.wantReason), out["reason"])
			require.Contains(t, out["message"], "address reservations need loopback addressing")
		})
	}
	require.Empty(t, em.ListAddresses())
	require.Empty(t, em.List())
}

// TestAddressesAcrossRestart: reservations come back with the emulator, bound
// again, and a restored node keeps its reserved address.
func TestAddressesAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := fastConfig(dir)
	cfg.Addressing = AddressingLoopback
	em, stop := startEmulator(t, cfg)
	ctx := context.Background()
	used, err := em.ReserveAddress(ctx, AddressSpec{Name: "used"})
	require.NoError(t, err)
	spare, err := em.ReserveAddress(ctx, AddressSpec{Name: "spare"})
	require.NoError(t, err)
	require.NotEqual(t, used.Address, spare.Address)
	node, err := em.Create(ctx, NodeSpec{Name: "cp-0", Address: used.Address})
	require.NoError(t, err)
	stop()

	em2, _ := startEmulator(t, cfg)
	got, err := em2.Get("cp-0")
	require.NoError(t, err)
	require.Equal(t, node.Address, got.Address)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, func() error {
			_, err := connectInsecure(t, got.Address).Version(callCtx(t))
			return err
		}())
	}, 15*time.Second, 10*time.Millisecond, "cp-0 answers on its reserved address")
	require.Equal(t, []Address{
		{Name: "spare", Address: spare.Address},
		{Name: "used", Address: used.Address, Node: "cp-0"},
	}, em2.ListAddresses())
	_, err = net.Listen("tcp", net.JoinHostPort(spare.Address, "50000"))
	require.Error(t, err, "a restored reservation is bound again")

	_, err = em2.Create(ctx, NodeSpec{Name: "cp-1", Address: used.Address})
	require.True(t, domain.IsConflict(err), "%v", err)
	st, err := em2.Create(ctx, NodeSpec{Name: "cp-1", Address: spare.Address})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(st.Address, spare.Address+":"), st.Address)

	require.NoError(t, em2.Delete("cp-0"))
	require.NoError(t, em2.ReleaseAddress("used"))
	require.NoFileExists(t, dir+"/addresses/used.json")
	require.FileExists(t, dir+"/addresses/spare.json")
}
