//go:build e2e

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/stretchr/testify/require"
)

func (p *proc) mergePatch(path, body string) int {
	req, err := http.NewRequest("PATCH", p.url+path, strings.NewReader(body))
	require.NoError(p.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/merge-patch+json")
	resp, err := p.client.Do(req)
	require.NoError(p.t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// patchVersion merge-patches path and answers the object's new
// resourceVersion.
func (p *proc) patchVersion(path, body string) string {
	req, err := http.NewRequest("PATCH", p.url+path, strings.NewReader(body))
	require.NoError(p.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/merge-patch+json")
	resp, err := p.client.Do(req)
	require.NoError(p.t, err)
	defer resp.Body.Close()
	var obj struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	require.Equal(p.t, http.StatusOK, resp.StatusCode)
	require.NoError(p.t, json.NewDecoder(resp.Body).Decode(&obj))
	require.NotEmpty(p.t, obj.Metadata.ResourceVersion)
	return obj.Metadata.ResourceVersion
}

func (p *proc) raw(path string) []byte {
	req, err := http.NewRequest("GET", p.url+path, nil)
	require.NoError(p.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := p.client.Do(req)
	require.NoError(p.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(p.t, err)
	require.Equal(p.t, http.StatusOK, resp.StatusCode, string(b))
	return b
}

type apply struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Operation string   `json:"operation"`
		Trigger   string   `json:"trigger"`
		Sources   []string `json:"sources"`
	} `json:"spec"`
	Status struct {
		Phase     string     `json:"phase"`
		StartTime *time.Time `json:"startTime"`
		EndTime   *time.Time `json:"endTime"`
		Error     string     `json:"error"`
		Holder    string     `json:"holder"`
		Replica   string     `json:"replica"`
		// TofuMilliseconds is the time spent in tofu processes.
		TofuMilliseconds int64 `json:"tofuMilliseconds"`
		Resources        struct {
			Added, Changed, Destroyed int
		} `json:"resources"`
	} `json:"status"`
}

func (p *proc) applies(tenant string) []apply {
	var l struct{ Items []apply }
	require.NoError(p.t, json.Unmarshal(p.raw("/api/v1/tenants/"+tenant+"/applies"), &l))
	return l.Items
}

type machine struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		NodeGroup, Role, Address, ProviderID, Hostname string
	} `json:"spec"`
	Status struct {
		Stage        string `json:"stage"`
		Ready        bool   `json:"ready"`
		TalosVersion string `json:"talosVersion"`
	} `json:"status"`
}

func (p *proc) machines(tenant string) []machine {
	var l struct{ Items []machine }
	require.NoError(p.t, json.Unmarshal(p.raw("/api/v1/tenants/"+tenant+"/machines"), &l))
	return l.Items
}

func (p *proc) reconciled(tenant string) bool {
	code, m := p.do("GET", "/api/v1/tenants/"+tenant, "")
	if code != http.StatusOK {
		return false
	}
	st, _ := m["status"].(map[string]any)
	conds, _ := st["conditions"].([]any)
	for _, c := range conds {
		c := c.(map[string]any)
		if c["type"] == "Reconciled" && c["status"] == "True" {
			md := m["metadata"].(map[string]any)
			return st["observedGeneration"] == md["generation"]
		}
	}
	return false
}

// settled waits until the tenant's applies all finished and it is reconciled.
func (p *proc) settled(tenant string, wantMachines int) {
	p.t.Helper()
	p.eventually(3*time.Minute, fmt.Sprintf("tenant %s reconciled with %d machines", tenant, wantMachines), func() bool {
		if !p.reconciled(tenant) || len(p.machines(tenant)) != wantMachines {
			return false
		}
		for _, a := range p.applies(tenant) {
			if a.Status.EndTime == nil {
				return false
			}
		}
		return true
	})
}

func (p *proc) emulatorNodes() []map[string]any {
	resp, err := http.DefaultClient.Do(p.emulatorRequest(http.MethodGet, "/v1/nodes", nil))
	require.NoError(p.t, err)
	defer resp.Body.Close()
	var l struct{ Items []map[string]any }
	require.NoError(p.t, json.NewDecoder(resp.Body).Decode(&l))
	return l.Items
}

func createCluster(t *testing.T, p *proc, tenant string, workers int) {
	t.Helper()
	code, body := p.do("POST", "/api/v1/tenants", `{"metadata":{"name":"`+tenant+`"},"spec":{}}`)
	require.Equal(t, http.StatusCreated, code, body)
	code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/nodegroups",
		`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"emulated"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/nodegroups",
		fmt.Sprintf(`{"metadata":{"name":"workers"},"spec":{"role":"worker","count":%d,"provider":"emulated"}}`, workers))
	require.Equal(t, http.StatusCreated, code, body)
}

// talosVersion asks a machine's Talos API for its version with the tenant's talosconfig.
func talosVersion(t *testing.T, p *proc, tenant, address string) error {
	tc, err := clientconfig.FromBytes(p.raw("/api/v1/tenants/" + tenant + "/talosconfig"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.WithConfig(tc), client.WithEndpoints(address))
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Version(ctx)
	return err
}
