package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The deploy/ files are checked against the server they run: every flag and
// REZUSCLOUD_* variable they set must be one serve reads, and the Kubernetes
// manifests must pass `kubectl apply --dry-run=client`.
//
// kubectl's client-side dry run still asks an API server which kinds exist
// (discovery), and there is no cluster here, so the test serves kubectl a
// discovery API for the kinds the manifests use (and 404 for every object,
// so each one is "created"). It cannot serve the OpenAPI schemas (they come
// with a real API server), so kubectl runs with --validate=false; the checks
// below stand in for the part of the schema that matters here.

var deployDir = filepath.Join("..", "..", "deploy")

// envOnly are the variables serve reads with os.Getenv, not through a flag.
var envOnly = map[string]bool{
	"REZUSCLOUD_ADMIN_PASSWORD": true, "REZUSCLOUD_SECRETS_PASSPHRASE": true,
	"REZUSCLOUD_STATE_PASSPHRASE": true, "REZUSCLOUD_SESSION_SIGNING_KEY": true,
}

// serveNames are serve's flag names and environment variables.
func serveNames(t *testing.T) (flags, env map[string]bool) {
	flags, env = map[string]bool{}, map[string]bool{}
	for k := range envOnly {
		env[k] = true
	}
	for _, f := range serveCommand().Flags {
		for _, n := range f.Names() {
			flags[n] = true
		}
		if ev, ok := f.(interface{ GetEnvVars() []string }); ok {
			for _, e := range ev.GetEnvVars() {
				env[e] = true
			}
		}
	}
	require.True(t, flags["all-peers"] && env["REZUSCLOUD_LISTEN"], "serve's flags are read")
	return flags, env
}

// manifestDocs reads every document of a YAML file.
func manifestDocs(t *testing.T, path string) []map[string]any {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs []map[string]any
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs
		}
		require.NoError(t, err, path)
		if d != nil {
			docs = append(docs, d)
		}
	}
}

// dig walks maps and lists: "spec.template.spec.containers.0.args".
func dig(v any, path string) any {
	for _, p := range strings.Split(path, ".") {
		switch t := v.(type) {
		case map[string]any:
			v = t[p]
		case []any:
			var i int
			if _, err := fmt.Sscan(p, &i); err != nil || i >= len(t) {
				return nil
			}
			v = t[i]
		default:
			return nil
		}
	}
	return v
}

func TestDeployManifests(t *testing.T) {
	flags, env := serveNames(t)
	files := []struct {
		file     string
		replicas int
	}{
		{"kubernetes/rezuscloud.yaml", 1},
		{"kubernetes/rezuscloud-ha.yaml", 3},
	}
	for _, f := range files {
		t.Run(f.file, func(t *testing.T) {
			docs := manifestDocs(t, filepath.Join(deployDir, f.file))
			services := map[string]bool{}
			var sts map[string]any
			for _, d := range docs {
				require.NotEmpty(t, d["apiVersion"])
				require.NotEmpty(t, dig(d, "metadata.name"), d)
				switch d["kind"] {
				case "Service":
					services[dig(d, "metadata.name").(string)] = true
				case "StatefulSet":
					sts = d
				}
			}
			require.NotNil(t, sts, "a StatefulSet")
			assert.Equal(t, f.replicas, dig(sts, "spec.replicas"))
			assert.True(t, services[dig(sts, "spec.serviceName").(string)], "the governing service is defined")
			selector := dig(sts, "spec.selector.matchLabels").(map[string]any)
			labels := dig(sts, "spec.template.metadata.labels").(map[string]any)
			for k, v := range selector {
				assert.Equal(t, v, labels[k], "the selector matches the pod labels")
			}
			c := dig(sts, "spec.template.spec.containers.0")
			require.NotNil(t, c)
			args, _ := dig(c, "args").([]any)
			require.NotEmpty(t, args)
			assert.Equal(t, "serve", args[0])
			for _, a := range args[1:] {
				name, _, _ := strings.Cut(strings.TrimPrefix(a.(string), "--"), "=")
				assert.True(t, flags[name], "serve has no flag --%s", name)
			}
			for _, e := range dig(c, "env").([]any) {
				n := dig(e, "name").(string)
				if strings.HasPrefix(n, "REZUSCLOUD_") {
					assert.True(t, env[n], "serve reads no %s", n)
				}
			}
			ports := map[string]bool{}
			for _, p := range dig(c, "ports").([]any) {
				ports[dig(p, "name").(string)] = true
			}
			for _, probe := range []string{"readinessProbe", "livenessProbe"} {
				assert.True(t, ports[dig(c, probe+".httpGet.port").(string)], "%s names a container port", probe)
			}
			mounts := map[string]bool{}
			for _, m := range dig(c, "volumeMounts").([]any) {
				mounts[dig(m, "mountPath").(string)] = true
			}
			assert.True(t, mounts["/data"], "the data volume is mounted on /data, the image's REZUSCLOUD_DATA_DIR")
			if f.replicas > 1 {
				assert.Contains(t, args, "--cluster-listen=0.0.0.0:6222")
				peers := ""
				for _, a := range args {
					if s := a.(string); strings.HasPrefix(s, "--all-peers=") {
						peers = strings.TrimPrefix(s, "--all-peers=")
					}
				}
				for i := 0; i < f.replicas; i++ {
					host := fmt.Sprintf("%s-%d.%s", dig(sts, "metadata.name"), i, dig(sts, "spec.serviceName"))
					assert.Contains(t, peers, host+":6222", "every pod is a peer")
					assert.Equal(t, f.replicas-1, len(withoutSelf(splitList(peers), strings.Split(host, ".")[0])), "each pod drops itself")
				}
			}
		})
	}

	t.Run("systemd", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(deployDir, "systemd", "rezuscloud.service"))
		require.NoError(t, err)
		for _, m := range regexp.MustCompile(`(?m)^#?\s*Environment=(REZUSCLOUD_[A-Z_]+)=`).FindAllStringSubmatch(string(b), -1) {
			assert.True(t, env[m[1]], "serve reads no %s", m[1])
		}
		assert.Contains(t, string(b), "ExecStart=/usr/local/bin/rezuscloud serve\n")
		// systemd's own check, with a binary that exists here.
		analyze, err := exec.LookPath("systemd-analyze")
		if err != nil {
			t.Log("systemd-analyze is not installed: the unit's syntax is not checked")
			return
		}
		dir := t.TempDir()
		unit := strings.ReplaceAll(string(b), "/usr/local/bin/rezuscloud", "/bin/true")
		require.NoError(t, os.WriteFile(filepath.Join(dir, "rezuscloud.service"), []byte(unit), 0o644))
		out, err := exec.Command(analyze, "verify", filepath.Join(dir, "rezuscloud.service")).CombinedOutput()
		assert.NoError(t, err, "%s", out)
		assert.NotContains(t, string(out), "Unknown key", "%s", out)
	})

	t.Run("kubectl apply --dry-run=client", func(t *testing.T) {
		kubectl, err := exec.LookPath("kubectl")
		if err != nil {
			if os.Getenv("REZUS_REQUIRE_KUBECTL") != "" {
				t.Fatal("kubectl is not installed (hack/check-deploy.sh installs Debian's kubernetes-client)")
			}
			t.Skip("kubectl is not installed; go tool task lint:deploy requires it")
		}
		srv := httptest.NewServer(discoveryAPI(t))
		defer srv.Close()
		kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
		require.NoError(t, os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: fake, user: {token: fake}}]
contexts: [{name: fake, context: {cluster: fake, user: fake, namespace: rezuscloud}}]
current-context: fake
`, srv.URL)), 0o600))
		for _, f := range files {
			cmd := exec.Command(kubectl, "apply", "--dry-run=client", "--validate=false", "-f", filepath.Join(deployDir, f.file))
			cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "HOME="+t.TempDir())
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s: %s", f.file, out)
			for _, d := range manifestDocs(t, filepath.Join(deployDir, f.file)) {
				assert.Contains(t, string(out), fmt.Sprintf("/%s created (dry run)", dig(d, "metadata.name")), "%s: %s", f.file, out)
			}
			assert.Contains(t, string(out), "statefulset.apps/rezuscloud created (dry run)")
		}
	})
}

// discoveryAPI answers kubectl's discovery for the kinds in deploy/ and 404
// for every object.
func discoveryAPI(t *testing.T) http.Handler {
	resource := func(name, kind string) map[string]any {
		return map[string]any{"name": name, "singularName": strings.ToLower(kind), "namespaced": true, "kind": kind,
			"verbs": []string{"create", "delete", "get", "list", "patch", "update", "watch"}}
	}
	group := func(name string) map[string]any {
		gv := map[string]any{"groupVersion": name + "/v1", "version": "v1"}
		return map[string]any{"name": name, "versions": []any{gv}, "preferredVersion": gv}
	}
	answers := map[string]any{
		"/api":  map[string]any{"kind": "APIVersions", "versions": []string{"v1"}, "serverAddressByClientCIDRs": []any{}},
		"/apis": map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": []any{group("apps"), group("policy")}},
		"/api/v1": map[string]any{"kind": "APIResourceList", "groupVersion": "v1", "resources": []any{
			resource("services", "Service"), resource("serviceaccounts", "ServiceAccount"), resource("secrets", "Secret"),
			resource("configmaps", "ConfigMap"), resource("persistentvolumeclaims", "PersistentVolumeClaim")}},
		"/apis/apps/v1":   map[string]any{"kind": "APIResourceList", "groupVersion": "apps/v1", "resources": []any{resource("statefulsets", "StatefulSet")}},
		"/apis/policy/v1": map[string]any{"kind": "APIResourceList", "groupVersion": "policy/v1", "resources": []any{resource("poddisruptionbudgets", "PodDisruptionBudget")}},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if a, ok := answers[r.URL.Path]; ok && r.Method == http.MethodGet {
			_ = json.NewEncoder(w).Encode(a)
			return
		}
		if r.Method != http.MethodGet {
			t.Errorf("kubectl's dry run sent %s %s", r.Method, r.URL.Path)
		}
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure",
			"reason": "NotFound", "code": http.StatusNotFound, "message": r.URL.Path + " not found"})
	})
}

// TestDockerfile checks what the image promises without building it (there
// is no container daemon here; hadolint, where installed, lints it too): a
// distroless final stage run as a non-root user, /data a volume, tofu and the
// provider mirror copied from where hack/tools.sh builds them, and only
// variables serve reads.
func TestDockerfile(t *testing.T) {
	_, env := serveNames(t)
	b, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	require.NoError(t, err)
	text := string(b)
	stages := regexp.MustCompile(`(?m)^FROM `).Split(text, -1)
	final := stages[len(stages)-1]
	assert.Regexp(t, `^gcr\.io/distroless/static-debian\d+:nonroot\n`, final)
	assert.Regexp(t, `(?m)^USER 65532:65532$`, final)
	assert.Regexp(t, `(?m)^VOLUME \["/data"\]$`, final)
	assert.Contains(t, final, "COPY --from=build /tools/bin/tofu /usr/local/bin/tofu\n")
	assert.Contains(t, final, "COPY --from=build /tools/mirror /usr/share/rezuscloud/providers\n")
	assert.Contains(t, final, "REZUSCLOUD_DATA_DIR=/data")
	assert.Contains(t, final, "REZUSCLOUD_TOFU=/usr/local/bin/tofu")
	assert.Contains(t, final, "REZUSCLOUD_PROVIDER_MIRROR=/usr/share/rezuscloud/providers")
	for _, m := range regexp.MustCompile(`(REZUSCLOUD_[A-Z_]+)=`).FindAllStringSubmatch(final, -1) {
		assert.True(t, env[m[1]], "serve reads no %s", m[1])
	}
	// The build stage builds static binaries and the tools where it copies them from.
	assert.Contains(t, stages[1], "CGO_ENABLED=0")
	assert.Contains(t, stages[1], "REZUS_TOOLS_DIR=/tools")
	tools, err := os.ReadFile(filepath.Join("..", "..", "hack", "tools.sh"))
	require.NoError(t, err)
	assert.Contains(t, string(tools), "#   bin/tofu ", "hack/tools.sh still builds tofu into bin/")
	assert.Contains(t, string(tools), "#   mirror/", "hack/tools.sh still builds the mirror into mirror/")
}
