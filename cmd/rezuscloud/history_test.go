//go:build !e2e && !browser

package main

// Recorded histories (issue 44): testdata/histories/<version>/ holds the
// admin backup of a server that an earlier release drove through every kind
// and lifecycle, and a manifest of what it made. TestRecordedHistories starts
// the current build on each of them; TestRecordHistory (tag history) records
// a new one. See testdata/histories/README.md.

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// historyManifest is testdata/histories/<version>/manifest.json: what a
// recorded history holds and what each thing must read back as.
type historyManifest struct {
	// Version and Commit name the release that wrote the history.
	Version string    `json:"version"`
	Commit  string    `json:"commit"`
	Date    time.Time `json:"date"`
	// Archive is the admin backup's file, beside the manifest.
	Archive string `json:"archive"`
	// SecretsPassphrase sealed the history's secrets (a throwaway one: the
	// archive never carries the sealing key).
	SecretsPassphrase string `json:"secretsPassphrase"`
	// Tenant is the tenant whose machines were built, upgraded and backed up.
	Tenant string `json:"tenant"`
	// EtcdBackup is its Succeeded etcd backup and the snapshot's sha256.
	EtcdBackup       string `json:"etcdBackup"`
	EtcdBackupSha256 string `json:"etcdBackupSha256"`
	// LastEventSeq is the event stream's last sequence when the backup was
	// taken; AuditRecords how many audit records were there by then.
	LastEventSeq uint64 `json:"lastEventSeq"`
	AuditRecords int    `json:"auditRecords"`
	// Objects must each read back with these fields.
	Objects []historyObject `json:"objects"`
	// Users can log in with Password (when set) and act with Token.
	Users []historyUser `json:"users"`
}

// historyObject is one object of a history: its path under /api/v1 and
// the fields (dotted paths into the object) with the values they must hold.
type historyObject struct {
	Kind   string         `json:"kind"`
	Tenant string         `json:"tenant,omitempty"`
	Name   string         `json:"name"`
	Path   string         `json:"path"`
	Fields map[string]any `json:"fields"`
}

// historyUser is a user of a history and its throwaway credentials.
type historyUser struct {
	Name     string `json:"name"`
	Password string `json:"password,omitempty"`
	// Token is an API token of the user; TokenName its object's name.
	Token     string `json:"token"`
	TokenName string `json:"tokenName"`
	// Role is what whoami answers for the user.
	Role string `json:"role"`
}

// field returns the value at a dotted path of a decoded object (nil when absent).
func field(obj map[string]any, path string) any {
	var cur any = obj
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

// historiesDir is testdata/histories at the repository's root.
func historiesDir(t *testing.T) string {
	t.Helper()
	root, err := tofutest.RepoRoot()
	require.NoError(t, err)
	return filepath.Join(root, "testdata", "histories")
}

// historyServerArgs are the flags a history's server runs with, recorded or
// replayed: the emulator with light nodes, the real tofu.
func historyServerArgs(t *testing.T) []string {
	t.Helper()
	tofu, mirror := tofutest.Tools(t)
	return []string{"--with-emulator", "--emulator-kube", "off", "--tofu", tofu, "--provider-mirror", mirror,
		"--apply-debounce", "1500ms", "--resync", "0"}
}

// startBinary starts bin (the test binary itself when empty) as a server
// with env added, and waits until it is ready and the emulated provider is
// registered.
func startBinary(t *testing.T, bin string, env []string, dataDir string, extra ...string) *proc {
	t.Helper()
	p := launch(t, bin, env, dataDir, extra...)
	p.waitReady(dataDir)
	p.await(time.Minute, "the emulated provider is registered", func() bool {
		code, _ := p.do("GET", "/api/v1/providers/emulated", "")
		return code == http.StatusOK
	})
	return p
}

// await polls cond until it holds, failing the test after d.
func (p *proc) await(d time.Duration, what string, cond func() bool) {
	p.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			p.t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// send makes a request with a bearer credential and answers the code and body.
func (p *proc) send(method, path, bearer, body string) (int, []byte, http.Header) {
	p.t.Helper()
	req, err := http.NewRequest(method, p.url+path, strings.NewReader(body))
	require.NoError(p.t, err)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	req.Header.Set("Content-Type", "application/json")
	if method == http.MethodPatch {
		req.Header.Set("Content-Type", "application/merge-patch+json")
	}
	resp, err := p.client.Do(req)
	require.NoError(p.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(p.t, err)
	return resp.StatusCode, b, resp.Header
}

// object GETs path as the admin and decodes it, failing unless it is 200.
func (p *proc) object(path string) map[string]any {
	p.t.Helper()
	code, b, _ := p.send(http.MethodGet, path, token, "")
	require.Equal(p.t, http.StatusOK, code, "GET %s: %s", path, b)
	var m map[string]any
	require.NoError(p.t, json.Unmarshal(b, &m))
	return m
}

// items GETs a list as the admin and answers its items.
func (p *proc) items(path string) []map[string]any {
	p.t.Helper()
	var l struct{ Items []map[string]any }
	require.NoError(p.t, json.Unmarshal(p.raw0(path), &l))
	return l.Items
}

func (p *proc) raw0(path string) []byte {
	p.t.Helper()
	code, b, _ := p.send(http.MethodGet, path, token, "")
	require.Equal(p.t, http.StatusOK, code, "GET %s: %s", path, b)
	return b
}

// watchEvents opens a watch and answers the first n events' types and
// objects' names, or fails after d.
func (p *proc) watchEvents(path string, n int, d time.Duration) []string {
	p.t.Helper()
	req, err := http.NewRequest(http.MethodGet, p.url+path, nil)
	require.NoError(p.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	client := &http.Client{Timeout: d}
	resp, err := client.Do(req)
	require.NoError(p.t, err)
	defer resp.Body.Close()
	require.Equal(p.t, http.StatusOK, resp.StatusCode)
	var got []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 1<<20), 4<<20)
	for len(got) < n && sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type   string
			Object map[string]any
		}
		require.NoError(p.t, json.Unmarshal([]byte(line), &ev))
		if ev.Type == "BOOKMARK" {
			continue
		}
		got = append(got, ev.Type+" "+fmt.Sprint(field(ev.Object, "metadata.name")))
	}
	require.Len(p.t, got, n, "watch %s ended early: %v", path, sc.Err())
	return got
}

// TestRecordedHistories starts the current build on every committed history
// (testdata/histories/<version>/) and checks that it reads everything that
// release wrote: every object of the manifest with its fields, lists and
// watches, the event stream from its start, the audit records, the users'
// passwords and API tokens, the sealed secrets (a tenant's talosconfig and
// machine configs render), the etcd backup's object, and that new work (a
// new tenant built on the emulator) runs on it.
func TestRecordedHistories(t *testing.T) {
	dir := historiesDir(t)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	n := 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		n++
		t.Run(e.Name(), func(t *testing.T) { replayHistory(t, filepath.Join(dir, e.Name())) })
	}
	require.NotZero(t, n, "no history under %s", dir)
}

func replayHistory(t *testing.T, dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	require.NoError(t, err)
	var m historyManifest
	require.NoError(t, json.Unmarshal(b, &m))
	require.Equal(t, filepath.Base(dir), m.Version, "a history's directory is named for its version")

	data := filepath.Join(t.TempDir(), "data")
	restore := exec.Command(os.Args[0], "restore", "--from", filepath.Join(dir, m.Archive), "--data-dir", data)
	restore.Env = append(os.Environ(), "REZUS_TEST_MAIN=1")
	out, err := restore.CombinedOutput()
	require.NoError(t, err, "restore: %s", out)
	p := startBinary(t, "", []string{"REZUSCLOUD_SECRETS_PASSPHRASE=" + m.SecretsPassphrase}, data, historyServerArgs(t)...)

	t.Run("objects", func(t *testing.T) {
		for _, o := range m.Objects {
			got := p.object("/api/v1/" + o.Path)
			require.Equal(t, o.Kind, got["kind"], o.Path)
			for f, want := range o.Fields {
				require.Equal(t, want, field(got, f), "%s %s", o.Path, f)
			}
		}
	})
	t.Run("lists and watches", func(t *testing.T) {
		want := map[string]bool{}
		for _, o := range m.Objects {
			if o.Kind == "NodeGroup" {
				want[o.Tenant+"/"+o.Name] = true
			}
		}
		got := map[string]bool{}
		for _, ng := range p.items("/api/v1/nodegroups") {
			got[fmt.Sprint(field(ng, "metadata.tenant"))+"/"+fmt.Sprint(field(ng, "metadata.name"))] = true
		}
		for k := range want {
			require.True(t, got[k], "the list of node groups holds %s", k)
		}
		tenant := p.object("/api/v1/tenants/" + m.Tenant)
		groups := p.items("/api/v1/tenants/" + m.Tenant + "/nodegroups")
		events := p.watchEvents("/api/v1/tenants/"+m.Tenant+"/nodegroups?watch=true", len(groups), 30*time.Second)
		for _, ev := range events {
			require.True(t, strings.HasPrefix(ev, "ADDED "), ev)
		}
		// A watch from the tenant's version sees the change made now, and only it.
		rv := fmt.Sprint(field(tenant, "metadata.resourceVersion"))
		code, body, _ := p.send(http.MethodPatch, "/api/v1/tenants/"+m.Tenant, token, `{"metadata":{"annotations":{"replayed":"yes"}}}`)
		require.Equal(t, http.StatusOK, code, string(body))
		require.Equal(t, []string{"MODIFIED " + m.Tenant},
			p.watchEvents("/api/v1/tenants?watch=true&resourceVersion="+rv+"&labelSelector=history%3Drecorded", 1, 30*time.Second))
	})
	t.Run("events", func(t *testing.T) {
		var l struct {
			Items []struct {
				Seq     uint64
				Subject string
				Object  map[string]any
			}
		}
		require.NoError(t, json.Unmarshal(p.raw0("/api/v1/events?since=0&limit=10000"), &l))
		require.NotEmpty(t, l.Items)
		seen := map[string]bool{}
		var last uint64
		for _, it := range l.Items {
			if it.Seq > m.LastEventSeq {
				continue // written by the replay's own server
			}
			require.Greater(t, it.Seq, last, "events in order")
			last = it.Seq
			require.NotNil(t, it.Object, "event %d has its object", it.Seq)
			seen[fmt.Sprint(it.Object["kind"], "/", field(it.Object, "metadata.tenant"), "/", field(it.Object, "metadata.name"))] = true
		}
		require.Equal(t, m.LastEventSeq, last, "the events replay up to the history's last")
		for _, o := range m.Objects {
			tn := o.Tenant
			if tn == "" {
				tn = "<nil>"
			}
			require.True(t, seen[o.Kind+"/"+tn+"/"+o.Name], "an event of %s %s/%s", o.Kind, o.Tenant, o.Name)
		}
	})
	t.Run("audit", func(t *testing.T) {
		var l struct{ Items []map[string]any }
		require.NoError(t, json.Unmarshal(p.raw0("/api/v1/audit?limit=10000"), &l))
		require.GreaterOrEqual(t, len(l.Items), m.AuditRecords)
		actors := map[any]bool{}
		for _, r := range l.Items {
			actors[r["actor"]] = true
		}
		for _, u := range m.Users {
			if u.Password != "" {
				require.True(t, actors[u.Name], "an audit record of %s", u.Name)
			}
		}
	})
	t.Run("users and tokens", func(t *testing.T) {
		for _, u := range m.Users {
			if u.Password != "" {
				code, b, _ := p.send(http.MethodPost, "/api/v1/auth/login", "", fmt.Sprintf(`{"username":%q,"password":%q}`, u.Name, u.Password))
				require.Equal(t, http.StatusOK, code, "login as %s: %s", u.Name, b)
				var login struct{ Token string }
				require.NoError(t, json.Unmarshal(b, &login))
				requireWhoami(t, p, login.Token, u)
			}
			requireWhoami(t, p, u.Token, u)
		}
	})
	t.Run("sealed secrets", func(t *testing.T) {
		tc := string(p.raw0("/api/v1/tenants/" + m.Tenant + "/talosconfig"))
		require.Contains(t, tc, "contexts:", "the talosconfig has its context")
		require.Contains(t, tc, "key: ", "the talosconfig has its client key")
		require.Contains(t, string(p.raw0("/api/v1/tenants/"+m.Tenant+"/kubeconfig/admin")), "client-key-data")
		for _, mc := range p.items("/api/v1/tenants/" + m.Tenant + "/machines") {
			cfg := string(p.raw0(fmt.Sprintf("/api/v1/tenants/%s/machines/%s/config?includeSecrets=true", m.Tenant, field(mc, "metadata.name"))))
			require.Contains(t, cfg, "token: ", "the machine config renders")
			if field(mc, "spec.role") == "controlplane" {
				// LS0tLS1CRUdJTi is "-----BEGIN" in base64: a control plane's
				// config holds the CA keys, opened from the sealed bundle.
				require.Contains(t, cfg, "key: LS0tLS1CRUdJTi", "the control plane's config holds the tenant's keys")
			}
		}
	})
	t.Run("etcd backup", func(t *testing.T) {
		code, b, h := p.send(http.MethodGet, "/api/v1/tenants/"+m.Tenant+"/etcdbackups/"+m.EtcdBackup+"/snapshot", token, "")
		require.Equal(t, http.StatusOK, code, string(b))
		sum := sha256.Sum256(b)
		require.Equal(t, m.EtcdBackupSha256, hex.EncodeToString(sum[:]))
		require.Equal(t, m.EtcdBackupSha256, h.Get("X-Snapshot-Sha256"))
	})
	t.Run("new work", func(t *testing.T) {
		for _, body := range []string{
			`{"metadata":{"name":"replayed"},"spec":{}}`,
		} {
			code, b, _ := p.send(http.MethodPost, "/api/v1/tenants", token, body)
			require.Equal(t, http.StatusCreated, code, string(b))
		}
		code, b, _ := p.send(http.MethodPost, "/api/v1/tenants/replayed/nodegroups", token,
			`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"emulated"}}`)
		require.Equal(t, http.StatusCreated, code, string(b))
		p.await(2*time.Minute, "the new tenant's apply succeeded and its machine is there", func() bool {
			applies := p.items("/api/v1/tenants/replayed/applies")
			return len(applies) > 0 && field(applies[len(applies)-1], "status.phase") == "Succeeded" &&
				len(p.items("/api/v1/tenants/replayed/machines")) == 1
		})
	})
}

// requireWhoami checks that a credential acts as its user with its role.
func requireWhoami(t *testing.T, p *proc, bearer string, u historyUser) {
	t.Helper()
	code, b, _ := p.send(http.MethodGet, "/api/v1/auth/whoami", bearer, "")
	require.Equal(t, http.StatusOK, code, "whoami of %s: %s", u.Name, b)
	var who struct{ User, Role string }
	require.NoError(t, json.Unmarshal(b, &who))
	require.Equal(t, u.Name, who.User)
	require.Equal(t, u.Role, who.Role)
}
