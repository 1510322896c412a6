package emulator

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/rezuscloud/rezuscloud/domain"
)

// Handler serves the emulator over HTTP, for the `emulated` provider and for
// people poking at it with curl. Bodies are JSON; errors are Kubernetes-style
// Status objects (domain.StatusOf).
//
//	GET    /v1/nodes                list nodes             200 {"items":[NodeStatus…]}
//	POST   /v1/nodes                create a node          201 NodeStatus
//	                                body NodeSpec: {"name":"cp-1","cluster":"demo","userData":"<base64 machine config>",
//	                                "address":"127.0.1.7"} (no userData: the node boots into maintenance mode;
//	                                address: a reserved one to boot on, 422 if not reserved, 409 if in use)
//	GET    /v1/nodes/{name}         one node               200 NodeStatus: {"name","cluster","address","phase","version",
//	                                "role","clusterID","configHash" (hex sha256 of the running config's bytes),
//	                                "kubernetesVersion" (tag of machine.kubelet.image), "stagedConfigHash",
//	                                "bootstrapped","etcdLeft","faults","error"}
//	DELETE /v1/nodes/{name}         stop and forget a node 204
//	PUT    /v1/nodes/{name}/faults  replace its faults     200 NodeStatus
//	                                body Faults: {"failNextUpgrade":true,"hang":false,"unreachable":false,"unhealthy":false,
//	                                "refuseApply":false} (refuseApply: ApplyConfiguration answers Unavailable)
//	                                ({} heals the node)
//	GET    /v1/addresses            list reservations      200 {"items":[Address…]}
//	POST   /v1/addresses            reserve an IP          201 Address: {"name":"cp","address":"127.0.1.7"}
//	                                body AddressSpec: {"name":"cp"} (403 in ports mode)
//	GET    /v1/addresses/{name}     one reservation        200 Address (with "node" when a node is on it)
//	DELETE /v1/addresses/{name}     release it             204 (409 while a node is on it)
func (e *Emulator) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"items": e.List()})
	})
	mux.HandleFunc("POST /v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		var spec NodeSpec
		if err := decode(r, &spec); err != nil {
			writeError(w, err)
			return
		}
		st, err := e.Create(r.Context(), spec)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, st)
	})
	mux.HandleFunc("GET /v1/nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		st, err := e.Get(r.PathValue("name"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("DELETE /v1/nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		if err := e.Delete(r.PathValue("name")); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("PUT /v1/nodes/{name}/faults", func(w http.ResponseWriter, r *http.Request) {
		var f Faults
		if err := decode(r, &f); err != nil {
			writeError(w, err)
			return
		}
		st, err := e.InjectFault(r.PathValue("name"), f)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("GET /v1/addresses", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"items": e.ListAddresses()})
	})
	mux.HandleFunc("POST /v1/addresses", func(w http.ResponseWriter, r *http.Request) {
		var spec AddressSpec
		if err := decode(r, &spec); err != nil {
			writeError(w, err)
			return
		}
		a, err := e.ReserveAddress(r.Context(), spec)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, a)
	})
	mux.HandleFunc("GET /v1/addresses/{name}", func(w http.ResponseWriter, r *http.Request) {
		a, err := e.GetAddress(r.PathValue("name"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, a)
	})
	mux.HandleFunc("DELETE /v1/addresses/{name}", func(w http.ResponseWriter, r *http.Request) {
		if err := e.ReleaseAddress(r.PathValue("name")); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// maxBody bounds a request: a machine config is tens of KiB.
const maxBody = 4 << 20

func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return domain.NewBadRequest("decoding the request body: " + err.Error())
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v) //nolint:errcheck // the client went away.
}

func writeError(w http.ResponseWriter, err error) {
	s := domain.StatusOf(err)
	writeJSON(w, s.Code, s)
}
