package emulator

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/rezuscloud/rezuscloud/domain"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Handler serves the emulator over HTTP, for the `emulated` provider and for
// people poking at it with curl. Bodies are JSON; errors are Kubernetes-style
// Status objects (domain.StatusOf). Every /v1 route needs the bearer token
// (Authorization: Bearer <APIToken()>; 401 Unauthorized without it): they
// make and remove nodes and inject faults that make remediation replace
// machines. The schematic routes need none, as the public Image Factory
// they stand in for: a schematic's ID is the hash of its content, so adding
// one changes no other.
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
//	                                "refuseApply":false,"kubernetesDownAt":"","kubeletDown":false} (refuseApply:
//	                                ApplyConfiguration answers Unavailable; kubernetesDownAt "v1.35.5": the control
//	                                plane does not start while its config names that Kubernetes version;
//	                                kubeletDown: its kubelet stops)
//	                                ({} heals the node)
//	GET    /v1/capacity             the node limit         200 Capacity: {"maxNodes":0} (0: no limit)
//	PUT    /v1/capacity             set it                 200 Capacity; body Capacity: a create beyond maxNodes answers
//	                                                       403 "insufficient capacity" (a cloud out of capacity); not kept
//	                                                       across restarts
//	GET    /v1/addresses            list reservations      200 {"items":[Address…]}
//	POST   /v1/addresses            reserve an IP          201 Address: {"name":"cp","address":"127.0.1.7"}
//	                                body AddressSpec: {"name":"cp"} (403 in ports mode)
//	GET    /v1/addresses/{name}     one reservation        200 Address (with "node" when a node is on it)
//	DELETE /v1/addresses/{name}     release it             204 (409 while a node is on it)
//
// A cluster's etcd, for tests. {cluster} is the clusterID its nodes report
// (cluster.id of the machine config, else cluster.clusterName; path-escape
// it); 404 when no configured control plane has it. Writes need the
// cluster bootstrapped (409 before bootstrap, and after a wipe until a recovery).
//
//	GET    /v1/clusters/{cluster}/etcd             read it     200 EtcdData: {"cluster","bootstrapped","revision","keys":{…},
//	                                               "padding","snapshotSize"} (revision 0, no keys while not bootstrapped)
//	DELETE /v1/clusters/{cluster}/etcd             disaster    204: every control plane loses its etcd data; the cluster
//	                                               is no longer bootstrapped, members answer EtcdMemberList, EtcdStatus and
//	                                               EtcdSnapshot with FailedPrecondition until Bootstrap{recover_etcd}
//	PUT    /v1/clusters/{cluster}/etcd/keys/{key…} write a key 200 EtcdData; body: the value (UTF-8, ≤ 1.5 MiB, else 422); revision
//	                                               +1; 403 past 8 MiB of keyspace (16 bytes counted per key); the key is the
//	                                               rest of the path, unescaped (%2F for a leading "/")
//	DELETE /v1/clusters/{cluster}/etcd/keys/{key…} delete it   200 EtcdData; revision +1; 404 if the key is not there
//	PUT    /v1/clusters/{cluster}/etcd/padding?bytes=N         200 EtcdData: snapshots carry N filler bytes (≤ 8 GiB, made
//	                                               as they stream) to test large snapshots; not a write (revision stays)
//
// The Image Factory's schematic API (schematics.go), in the factory's own
// format, so the emulator stands in for the factory (serve --image-factory):
//
//	POST   /schematics              add a schematic        201 {"id":"<sha256>"}; body: the factory's YAML or JSON
//	                                                       ({customization: {systemExtensions: {officialExtensions: [...]},
//	                                                       extraKernelArgs: [...], meta: [{key, value}]}}), ≤ 64 KiB
//	GET    /schematics/{id}         read it back           200 the factory's YAML; 404 when the catalogue lacks it
func (e *Emulator) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /schematics", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(io.LimitReader(r.Body, maxSchematicBody+1))
		if err != nil {
			writeError(w, domain.NewBadRequest("reading the request body: "+err.Error()))
			return
		}
		if len(b) > maxSchematicBody {
			writeError(w, &domain.Error{Reason: domain.ReasonRequestEntityTooLarge, Message: fmt.Sprintf("a schematic is at most %d bytes", maxSchematicBody)})
			return
		}
		s, err := domain.ParseFactorySchematic(b)
		if err != nil {
			writeError(w, domain.NewBadRequest(err.Error()))
			return
		}
		if causes := s.Validate(field.NewPath("customization")); len(causes) > 0 {
			writeError(w, domain.NewInvalid("Schematic", "", causes))
			return
		}
		id, err := e.AddSchematic(s)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, map[string]string{"id": id})
	})
	mux.HandleFunc("GET /schematics/{id}", func(w http.ResponseWriter, r *http.Request) {
		s, ok := e.lookupSchematic(r.PathValue("id"))
		if !ok {
			writeError(w, domain.NewNotFound("Schematic", r.PathValue("id")))
			return
		}
		w.Header().Set("Content-Type", "application/yaml")
		w.Write(s.FactoryYAML()) //nolint:errcheck // the client went away.
	})
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
	mux.HandleFunc("GET /v1/capacity", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, e.GetCapacity())
	})
	mux.HandleFunc("PUT /v1/capacity", func(w http.ResponseWriter, r *http.Request) {
		var c Capacity
		if err := decode(r, &c); err != nil {
			writeError(w, err)
			return
		}
		got, err := e.SetCapacity(c)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, got)
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
	e.etcdRoutes(mux)
	top := http.NewServeMux()
	top.Handle("/v1/", e.requireToken(mux))
	top.Handle("/", mux)
	return top
}

// etcdRoutes adds the etcd data API documented on Handler.
func (e *Emulator) etcdRoutes(mux *http.ServeMux) {
	answer := func(w http.ResponseWriter, d EtcdData, err error) {
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, d)
	}
	mux.HandleFunc("GET /v1/clusters/{cluster}/etcd", func(w http.ResponseWriter, r *http.Request) {
		d, err := e.EtcdData(r.PathValue("cluster"))
		answer(w, d, err)
	})
	mux.HandleFunc("DELETE /v1/clusters/{cluster}/etcd", func(w http.ResponseWriter, r *http.Request) {
		if err := e.WipeEtcd(r.PathValue("cluster")); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("PUT /v1/clusters/{cluster}/etcd/keys/{key...}", func(w http.ResponseWriter, r *http.Request) {
		// One byte past the limit, so PutEtcdKey sees a value that is too long.
		value, err := io.ReadAll(io.LimitReader(r.Body, maxEtcdValue+1))
		if err != nil {
			writeError(w, domain.NewBadRequest("reading the value: "+err.Error()))
			return
		}
		d, err := e.PutEtcdKey(r.PathValue("cluster"), r.PathValue("key"), string(value))
		answer(w, d, err)
	})
	mux.HandleFunc("DELETE /v1/clusters/{cluster}/etcd/keys/{key...}", func(w http.ResponseWriter, r *http.Request) {
		d, err := e.DeleteEtcdKey(r.PathValue("cluster"), r.PathValue("key"))
		answer(w, d, err)
	})
	mux.HandleFunc("PUT /v1/clusters/{cluster}/etcd/padding", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.ParseInt(r.URL.Query().Get("bytes"), 10, 64)
		if err != nil {
			writeError(w, domain.NewBadRequest("bytes must be a whole number of bytes: "+err.Error()))
			return
		}
		d, err := e.SetEtcdPadding(r.PathValue("cluster"), n)
		answer(w, d, err)
	})
}

// maxBody bounds a request: a machine config is tens of KiB.
const maxBody = 4 << 20

// maxSchematicBody bounds a posted schematic.
const maxSchematicBody = 64 << 10

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
