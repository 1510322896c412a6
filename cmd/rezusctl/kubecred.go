package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"go.yaml.in/yaml/v3"
)

// Per-user cluster credentials (docs/security.md): the kubeconfig that
// `rezusctl kubeconfig` writes holds no key; its user runs
// `rezusctl credential kubernetes`, which prints an ExecCredential of the
// caller, asked of the server and cached (mode 0600) until 10 s before
// it ends.

// credentialMargin is how long before its end a cached credential is
// replaced, so kubectl never sends one that ends mid-request.
const credentialMargin = 10 * time.Second

// execCredential is client.authentication.k8s.io/v1 ExecCredential.
type execCredential struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Status     struct {
		ExpirationTimestamp   time.Time `json:"expirationTimestamp"`
		ClientCertificateData string    `json:"clientCertificateData"`
		ClientKeyData         string    `json:"clientKeyData"`
	} `json:"status"`
}

func (r *rezusctl) credentialPluginCommand() *cli.Command {
	return &cli.Command{
		Name:  "credential",
		Usage: "print a short-lived cluster credential of yours (what a kubeconfig's exec plugin runs)",
		Subcommands: []*cli.Command{{
			Name:  "kubernetes",
			Usage: "an ExecCredential (client.authentication.k8s.io/v1) for the tenant's cluster",
			Description: "The server issues a client certificate of you, in the group of your role on the tenant, valid for\n" +
				"its credential lifetime (1h by default); it is cached (mode 0600, under ~/.cache/rezus/credentials)\n" +
				"until 10 s before it ends. A role taken away ends the next issuance.",
			Flags: []cli.Flag{
				tenantFlag(),
				&cli.BoolFlag{Name: "no-cache", Usage: "ask the server even when a cached credential is still good"},
			},
			Action: r.kubernetesCredential,
		}},
	}
}

func (r *rezusctl) kubernetesCredential(c *cli.Context) error {
	s, cl, err := r.connect(c)
	if err != nil {
		return err
	}
	tenant := s.tenant(c)
	if tenant == "" {
		return errors.New("give the tenant with --tenant/-t (or set one on the context)")
	}
	cache, err := r.credentialCachePath(s, tenant)
	if err != nil {
		return err
	}
	now := r.env.Now()
	if !c.Bool("no-cache") {
		if b, err := os.ReadFile(cache); err == nil {
			var ec execCredential
			if json.Unmarshal(b, &ec) == nil && ec.Status.ExpirationTimestamp.After(now.Add(credentialMargin)) {
				_, err := r.env.Stdout.Write(b)
				return err
			}
		}
	}
	var body []byte
	if err := cl.call(c.Context, request{method: http.MethodPost, path: "/api/v1/tenants/" + tenant + "/kubernetes/credential"}, &body); err != nil {
		_ = os.Remove(cache) // a refused caller keeps nothing
		return err
	}
	var ec execCredential
	if err := json.Unmarshal(body, &ec); err != nil || ec.Kind != "ExecCredential" {
		return fmt.Errorf("the server's answer is not an ExecCredential: %.200s", body)
	}
	if err := writeFileAtomic(cache, body); err != nil {
		return err
	}
	r.dropExpiredCredentials(filepath.Dir(cache), now)
	_, err = r.env.Stdout.Write(body)
	return err
}

// credentialCachePath is the cache file of a tenant's credential for the
// session's server and token: another login (a new token) never reads a
// credential of the one before.
func (r *rezusctl) credentialCachePath(s *session, tenant string) (string, error) {
	dir := r.env.Getenv("XDG_CACHE_HOME")
	if dir == "" {
		home := r.env.Getenv("HOME")
		if home == "" {
			h, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("finding the credential cache: set XDG_CACHE_HOME or HOME: %w", err)
			}
			home = h
		}
		dir = filepath.Join(home, ".cache")
	}
	sum := sha256.Sum256([]byte(s.opts.Server + "\x00" + s.opts.Token + "\x00" + tenant))
	return filepath.Join(dir, "rezus", "credentials", "kubernetes-"+hex.EncodeToString(sum[:16])+".json"), nil
}

// dropExpiredCredentials removes cached credentials that have ended.
func (r *rezusctl) dropExpiredCredentials(dir string, now time.Time) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "kubernetes-") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var ec execCredential
		if json.Unmarshal(b, &ec) != nil || !ec.Status.ExpirationTimestamp.After(now) {
			_ = os.Remove(p)
		}
	}
}

// execKubeconfig points the exec plugin of a kubeconfig the server wrote at
// this rezusctl (its absolute path), its config file and context, so that
// kubectl runs it with the login the kubeconfig was written from.
func (r *rezusctl) execKubeconfig(s *session, kc []byte) ([]byte, error) {
	if s.ctx == nil {
		return nil, errors.New("the kubeconfig's credential plugin needs a saved login: run rezusctl login first (or use --context)")
	}
	exe, err := r.env.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding rezusctl's own path for the kubeconfig: %w", err)
	}
	cfgPath, err := filepath.Abs(s.cfgPath)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := yaml.Unmarshal(kc, &doc); err != nil {
		return nil, fmt.Errorf("reading the server's kubeconfig: %w", err)
	}
	users, _ := doc["users"].([]any)
	found := false
	for _, u := range users {
		um, _ := u.(map[string]any)
		user, _ := um["user"].(map[string]any)
		exec, _ := user["exec"].(map[string]any)
		if exec == nil {
			continue
		}
		found = true
		exec["command"] = exe
		args, _ := exec["args"].([]any)
		exec["args"] = append([]any{"--context", s.ctx.Name}, args...)
		env, _ := exec["env"].([]any)
		exec["env"] = append(env, map[string]any{"name": "REZUSCONFIG", "value": cfgPath})
	}
	if !found {
		return nil, errors.New("the server's kubeconfig has no exec credential plugin")
	}
	return encodeYAML(doc)
}
