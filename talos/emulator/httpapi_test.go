package emulator

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestHTTPAPI(t *testing.T) {
	t.Parallel()
	em, _ := startEmulator(t, Config{Addressing: AddressingPorts})
	srv := httptest.NewServer(em.Handler())
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
}
