//go:build readme

package main

// What each README command promises, and the checks that hold it to it.

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// machinesOf reads the quick start tenant's machines through the CLI, as JSON.
func (e *readmeEnv) machinesOf(t *testing.T, tenant string) []readmeMachine {
	r := e.run(t, "bin/rezusctl get machines -t "+tenant+" -o json", time.Minute)
	require.Equal(t, 0, r.code, r.out)
	var l struct{ Items []readmeMachine }
	require.NoError(t, json.Unmarshal([]byte(r.out), &l), r.out)
	return l.Items
}

type readmeMachine struct {
	Metadata struct{ Name string } `json:"metadata"`
	Spec     struct {
		Role, Address string
	} `json:"spec"`
	Status struct {
		Stage        string `json:"stage"`
		Ready        bool   `json:"ready"`
		TalosVersion string `json:"talosVersion"`
	} `json:"status"`
}

// requireFile checks a file a command wrote: there, mode 0600, holding want.
// requireNodes asks the cluster's API server, through kubectl, for its Nodes:
// the tenant's three machines, each Ready with its kubelet at version, and
// the server itself at version.
func requireNodes(t *testing.T, e *readmeEnv, version string) {
	t.Helper()
	r := e.run(t, "kubectl --kubeconfig demo.kubeconfig get nodes -o json", time.Minute)
	require.Equal(t, 0, r.code, r.out)
	var nodes struct {
		Items []struct {
			Metadata struct{ Name string }
			Status   struct {
				Conditions []struct{ Type, Status string }
				NodeInfo   struct{ KubeletVersion string }
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &nodes), r.out)
	var names []string
	for _, n := range nodes.Items {
		names = append(names, n.Metadata.Name)
		require.Equal(t, version, n.Status.NodeInfo.KubeletVersion, n.Metadata.Name)
		ready := false
		for _, c := range n.Status.Conditions {
			ready = ready || (c.Type == "Ready" && c.Status == "True")
		}
		require.True(t, ready, "node %s is Ready", n.Metadata.Name)
	}
	// The emulated provider names a machine's node (its hostname, so its
	// Node) <tenant>-<machine>.
	var machines []string
	for _, m := range e.machinesOf(t, "demo") {
		machines = append(machines, "demo-"+m.Metadata.Name)
	}
	require.ElementsMatch(t, machines, names, "a Node per machine")
	v := e.run(t, "kubectl --kubeconfig demo.kubeconfig version -o json", time.Minute)
	require.Contains(t, v.out, `"gitVersion": "`+version+`"`, "the API server's version:\n%s", v.out)
}

func requireFile(t *testing.T, e *readmeEnv, name string, want ...string) {
	t.Helper()
	path := filepath.Join(e.dir, name)
	fi, err := os.Stat(path)
	require.NoError(t, err, "%s was not written", name)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "%s holds credentials or configs: mode 0600", name)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, w := range want {
		require.Contains(t, string(b), w, name)
	}
}

// readmeExpectation is what a README command promises.
type readmeExpectation struct {
	match *regexp.Regexp
	// skip says why the line is not run.
	skip string
	// server: started in the background and waited for (/readyz).
	server bool
	// until: the command does not end by itself; it runs until its output
	// satisfies until, then is interrupted.
	until   func(out string) bool
	timeout time.Duration
	// check asserts on what the command did (a run that ended exited 0).
	check func(t *testing.T, e *readmeEnv, r shellRun)
}

func expectationFor(l readmeLine) *readmeExpectation {
	for _, x := range readmeExpectations {
		if x.match.MatchString(l.Command) {
			if x.timeout == 0 {
				x.timeout = 2 * time.Minute
			}
			return &x
		}
	}
	return nil
}

func contains(subs ...string) func(string) bool {
	return func(out string) bool {
		for _, s := range subs {
			if !strings.Contains(out, s) {
				return false
			}
		}
		return true
	}
}

// rowsWith counts the lines of out that match every pattern.
func rowsWith(out string, patterns ...string) int {
	n := 0
	for _, line := range strings.Split(out, "\n") {
		ok := true
		for _, p := range patterns {
			if !regexp.MustCompile(p).MatchString(line) {
				ok = false
				break
			}
		}
		if ok {
			n++
		}
	}
	return n
}

const ipPort = `\b\d+\.\d+\.\d+\.\d+(:\d+)?\b`

// readmeExpectations, first match wins. Each says what the README's comment
// beside the command promises, checked as a user would look.
var readmeExpectations = []readmeExpectation{
	{match: regexp.MustCompile(`^go tool task test$`), skip: "the test command: it runs this test"},
	{match: regexp.MustCompile(`^go tool task tools$`), timeout: 30 * time.Minute, check: func(t *testing.T, e *readmeEnv, r shellRun) {
		for _, bin := range []string{".tools/bin/tofu", ".tools/bin/talosctl"} {
			fi, err := os.Stat(filepath.Join(e.dir, bin))
			require.NoError(t, err, r.out)
			require.NotZero(t, fi.Mode()&0o111, bin)
		}
	}},
	{match: regexp.MustCompile(`^go run \./cmd/rezuscloud serve `), server: true},
	{match: regexp.MustCompile(`^go build -o bin/rezusctl \./cmd/rezusctl$`), check: func(t *testing.T, e *readmeEnv, r shellRun) {
		_, err := os.Stat(filepath.Join(e.dir, "bin/rezusctl"))
		require.NoError(t, err)
	}},
	{match: regexp.MustCompile(`^source <\(bin/rezusctl completion bash\)$`)},
	{match: regexp.MustCompile(`^PW=\$\(cat data/initial-admin-password\)$`), check: func(t *testing.T, e *readmeEnv, r shellRun) {
		// The web UI answers beside the API on the first block's server.
		code, loc := httpGet("http://" + readmeServer + "/")
		require.Equal(t, http.StatusFound, code)
		require.Contains(t, loc, "/ui/")
		code, body := httpGet("http://" + readmeServer + "/ui/login")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, "<form")
	}},
	{match: regexp.MustCompile(`^TOKEN=\$\(curl .*/api/v1/auth/login`), check: func(t *testing.T, e *readmeEnv, r shellRun) {
		out := e.run(t, `echo -n "$TOKEN"`, time.Minute)
		require.Regexp(t, `^[A-Za-z0-9._-]{20,}$`, out.out, "the login answered a token")
	}},
	{match: regexp.MustCompile(`^curl -s .* -d .*"name":"acme".* http://127\.0\.0\.1:8080/api/v1/tenants$`), check: func(t *testing.T, e *readmeEnv, r shellRun) {
		require.Contains(t, r.out, `"kind":"Tenant"`)
		require.Contains(t, r.out, `"name":"acme"`)
	}},
	{match: regexp.MustCompile(`^curl -s .*/api/v1/tenants\?labelSelector=env%3Dprod'$`), check: func(t *testing.T, e *readmeEnv, r shellRun) {
		require.Contains(t, r.out, `"kind":"TenantList"`)
		require.Contains(t, r.out, `"name":"acme"`)
	}},
	{match: regexp.MustCompile(`^curl -N .*/api/v1/tenants\?watch=true'$`), until: contains(`"type":"ADDED"`, `"name":"acme"`)},
	{match: regexp.MustCompile(`^bin/rezusctl login --server http://127\.0\.0\.1:8080 --username admin --password-stdin < data/initial-admin-password$`)},
	{match: regexp.MustCompile(`^bin/rezusctl apply -f examples/emulated-cluster\.yaml$`), check: func(t *testing.T, e *readmeEnv, r shellRun) {
		require.Contains(t, r.out, "tenant/demo")
		require.Contains(t, r.out, "nodegroup/workers")
	}},
	// One apply: Queued, Planning, Applying, Succeeded.
	{match: regexp.MustCompile(`^bin/rezusctl get applies -t demo -w$`), timeout: 5 * time.Minute,
		until: func(out string) bool { return strings.Contains(out, "Succeeded") || strings.Contains(out, "Failed") },
		check: func(t *testing.T, e *readmeEnv, r shellRun) {
			require.NotContains(t, r.out, "Failed", r.out)
			e.t.Logf("quick start: from serve to the apply's Succeeded in %s", time.Since(e.quickStartBegan()).Round(time.Second))
		}},
	// Three machines with their Talos API addresses, observed running by
	// the time the apply said Succeeded (issue 26).
	{match: regexp.MustCompile(`^bin/rezusctl get machines -t demo$`), check: func(t *testing.T, e *readmeEnv, r shellRun) {
		require.Equal(t, 3, rowsWith(r.out, ipPort), "three machines with addresses:\n%s", r.out)
		require.Equal(t, 3, rowsWith(r.out, ipPort, `\bRunning\b`, `\btrue\b`), "each observed Running and ready right after the apply:\n%s", r.out)
		ms := e.machinesOf(t, "demo")
		require.Len(t, ms, 3)
		for _, m := range ms {
			if m.Spec.Role == "controlplane" {
				e.name, e.address = m.Metadata.Name, m.Spec.Address
			}
		}
		require.NotEmpty(t, e.name, "a control-plane machine")
	}},
	// ... and CONFIG: up to date, pending or failed.
	{match: regexp.MustCompile(`^bin/rezusctl get machines -t demo -o wide$`), check: func(t *testing.T, e *readmeEnv, r shellRun) {
		require.Contains(t, r.out, "CONFIG")
		require.Equal(t, 3, rowsWith(r.out, ipPort, `up to date|pending|failed`), r.out)
	}},
	// Conditions, config history, events.
	{match: regexp.MustCompile(`^bin/rezusctl describe machine \S+ -t demo$`), check: func(t *testing.T, e *readmeEnv, r shellRun) {
		for _, want := range []string{e.name, "Conditions", "Config History", "Events"} {
			require.Contains(t, r.out, want, r.out)
		}
	}},
	// The newest apply's tofu log.
	{match: regexp.MustCompile(`^bin/rezusctl logs -t demo$`), check: func(t *testing.T, e *readmeEnv, r shellRun) {
		require.Contains(t, r.out, "Apply complete", r.out)
	}},
	// What apply would change: nothing, right after the apply (exit 0).
	{match: regexp.MustCompile(`^bin/rezusctl diff -f examples/emulated-cluster\.yaml$`)},
	// A machine's service log through the Talos API.
	{match: regexp.MustCompile(`^bin/rezusctl logs machine/\S+ -t demo --service kubelet$`), check: func(t *testing.T, e *readmeEnv, r shellRun) {
		require.NotEmpty(t, strings.TrimSpace(r.out), "the kubelet's log")
	}},
	// The machine config the server renders, written 0600.
	{match: regexp.MustCompile(`^bin/rezusctl config render machine/\S+ -t demo -o m\.yaml$`), check: func(t *testing.T, e *readmeEnv, r shellRun) {
		requireFile(t, e, "m.yaml", "machine:", "cluster:", "# RezusCloud left out the secrets of this config")
	}},
	// The kept versions of the tenant's tofu state, and the lock.
	{match: regexp.MustCompile(`^bin/rezusctl state list -t demo$`), check: func(t *testing.T, e *readmeEnv, r shellRun) {
		require.Regexp(t, `(?i)lock`, r.out)
		require.GreaterOrEqual(t, rowsWith(r.out, `^\s*\d+\s`), 1, "at least one kept version:\n%s", r.out)
	}},
	// demo.talosconfig, which the real talosctl uses as the comment shows.
	{match: regexp.MustCompile(`^bin/rezusctl talosconfig -t demo$`), check: func(t *testing.T, e *readmeEnv, r shellRun) {
		requireFile(t, e, "demo.talosconfig", "context: demo")
		host, _, err := net.SplitHostPort(e.address)
		if err != nil {
			host = e.address
		}
		v := e.run(t, ".tools/bin/talosctl --talosconfig demo.talosconfig -n "+host+" version", time.Minute)
		require.Equal(t, 0, v.code, v.out)
		require.Contains(t, v.out, "Server:", v.out)
	}},
	{match: regexp.MustCompile(`^bin/rezusctl kubeconfig -t demo$`), check: func(t *testing.T, e *readmeEnv, r shellRun) {
		requireFile(t, e, "demo.kubeconfig", "clusters:", "certificate-authority-data")
	}},
	// The real API server answers with the three Nodes, Ready, at the
	// tenant's version; judged again in JSON, not only by the table.
	{match: regexp.MustCompile(`^kubectl --kubeconfig demo\.kubeconfig get nodes$`), check: func(t *testing.T, e *readmeEnv, r shellRun) {
		require.Equal(t, 3, rowsWith(r.out, `\sReady\s`, `\sv1\.35\.4$`), r.out)
		requireNodes(t, e, "v1.35.4")
	}},
	{match: regexp.MustCompile(`^kubectl --kubeconfig demo\.kubeconfig get nodes -o wide$`), check: func(t *testing.T, e *readmeEnv, r shellRun) {
		require.Equal(t, 3, rowsWith(r.out, `\sReady\s`, `\sv1\.36\.1\s`), r.out)
		requireNodes(t, e, "v1.36.1")
	}},
	// Probes every machine through the Talos API.
	{match: regexp.MustCompile(`^bin/rezusctl health demo$`), check: func(t *testing.T, e *readmeEnv, r shellRun) {
		require.Contains(t, r.out, "demo: Ready, 3/3 machines ready", r.out)
	}},
	// Rolling upgrades, Talos then Kubernetes.
	{match: regexp.MustCompile(`^bin/rezusctl upgrade demo --talos-version v1\.13\.1 --wait$`), timeout: 5 * time.Minute, check: func(t *testing.T, e *readmeEnv, r shellRun) {
		require.Contains(t, r.out, "Succeeded", r.out)
		for _, m := range e.machinesOf(t, "demo") {
			require.Equal(t, "v1.13.1", m.Status.TalosVersion, m.Metadata.Name)
		}
	}},
	{match: regexp.MustCompile(`^bin/rezusctl upgrade demo --kubernetes-version v1\.36\.1 --wait$`), timeout: 5 * time.Minute, check: func(t *testing.T, e *readmeEnv, r shellRun) {
		require.Contains(t, r.out, "Succeeded", r.out)
	}},
	// tofu destroy, then the tenant goes.
	{match: regexp.MustCompile(`^bin/rezusctl delete tenant demo --wait$`), timeout: 5 * time.Minute, check: func(t *testing.T, e *readmeEnv, r shellRun) {
		g := e.run(t, "bin/rezusctl get tenant demo", time.Minute)
		require.NotEqual(t, 0, g.code, g.out)
		require.Contains(t, g.out, "not found", g.out)
	}},
}
