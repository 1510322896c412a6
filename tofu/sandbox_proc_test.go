package tofu

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/internal/proctree"
	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// TestSandboxHidesTheServersProcesses: issue 42, finding 4. The sandbox was
// a mount namespace only, and /proc was the server's: a module read the seal
// key through the server's own entries — its root
// (`filebase64("/proc/<ppid>/root/<key file>")`, the ppid read from
// /proc/self/stat), its working dir, its open files, its environment — and
// through /proc/1 (the host's init, whose root is the host's). Now tofu has
// a PID namespace with a /proc of its own: none of those paths reaches a
// process outside the sandbox, whose first process holds nothing secret.
func TestSandboxHidesTheServersProcesses(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Fatal("the sandbox is Linux's namespaces")
	}
	tofu, _ := tofutest.Tools(t)
	base := t.TempDir()
	data := filepath.Join(base, "data")
	sealKey := filepath.Join(data, "secrets.key")
	keyFile := filepath.Join(base, "elsewhere", "seal.key") // --secrets-key-file
	secrets := map[string]string{sealKey: "SECRET-SEAL-KEY", keyFile: "SECRET-KEY-FILE"}
	for p, v := range secrets {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
		require.NoError(t, os.WriteFile(p, []byte(v), 0o600))
	}
	// The server holds the key file open and runs in base, as a server
	// started there with --secrets-key-file would.
	open, err := os.Open(keyFile)
	require.NoError(t, err)
	defer open.Close()
	t.Chdir(base)
	// What is in the server's environment and not in tofu's.
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + filepath.Join(data, "tofu", "home"), "TF_IN_AUTOMATION=1",
		"CHECKPOINT_DISABLE=1", "TF_CLI_CONFIG_FILE=" + filepath.Join(base, "tofurc")}
	require.NoError(t, os.WriteFile(filepath.Join(base, "tofurc"), nil, 0o600))
	serverEnv := serverOnlyEnv(t, env)

	dir := filepath.Join(data, "tofu", "tenants", "mine")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	server, fd := strconv.Itoa(os.Getpid()), strconv.Itoa(int(open.Fd()))
	paths := map[string]string{}
	for _, pid := range []string{server, "${local.ppid}", "1"} {
		name := map[string]string{server: "server", "${local.ppid}": "ppid", "1": "init"}[pid]
		paths[name+"_root_key_file"] = "/proc/" + pid + "/root" + keyFile
		paths[name+"_root_seal_key"] = "/proc/" + pid + "/root" + sealKey
		paths[name+"_cwd_seal_key"] = "/proc/" + pid + "/cwd/data/secrets.key"
		paths[name+"_fd"] = "/proc/" + pid + "/fd/" + fd
		paths[name+"_environ"] = "/proc/" + pid + "/environ"
		paths[name+"_cmdline"] = "/proc/" + pid + "/cmdline"
	}
	var main strings.Builder
	main.WriteString("locals {\n  ppid = try(split(\" \", file(\"/proc/self/stat\"))[3], \"none\")\n  paths = {\n")
	keys := make([]string, 0, len(paths))
	for k := range paths {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&main, "    %s = \"%s\"\n", k, paths[k])
	}
	main.WriteString("  }\n}\noutput \"read\" {\n  value = { for k, p in local.paths : k => try(filebase64(p), \"\") }\n}\n")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.tf"), []byte(main.String()), 0o600))

	read := func(tf Binary) map[string]string {
		t.Helper()
		ctx := context.Background()
		var out bytes.Buffer
		require.NoError(t, tf.RunTofu(ctx, dir, env, &out, "apply", "-auto-approve", "-input=false", "-no-color"), out.String())
		out.Reset()
		require.NoError(t, tf.RunTofu(ctx, dir, env, &out, "output", "-json", "read"), out.String())
		var enc map[string]string
		require.NoError(t, json.Unmarshal(out.Bytes(), &enc), out.String())
		got := map[string]string{}
		for k, v := range enc {
			b, err := base64.StdEncoding.DecodeString(v)
			require.NoError(t, err)
			got[k] = string(b)
		}
		return got
	}
	leaks := func(got map[string]string) []string {
		var found []string
		for _, k := range keys {
			for _, s := range append([]string{"SECRET-SEAL-KEY", "SECRET-KEY-FILE"}, serverEnv...) {
				if strings.Contains(got[k], s) {
					found = append(found, k+" ("+paths[k]+") holds "+s)
					break
				}
			}
		}
		return found
	}

	sandboxed := read(Binary{Bin: tofu, Sandbox: &Sandbox{Hide: []string{data}, HideFiles: []string{keyFile}}})
	require.Empty(t, leaks(sandboxed), "the module read the server's secrets through /proc")

	// Without the sandbox the same module reads them: the test can fail.
	plain := leaks(read(Binary{Bin: tofu}))
	require.NotEmpty(t, plain)
	t.Logf("without the sandbox: %s", strings.Join(plain, "; "))
}

// serverOnlyEnv is what this process's environment, as /proc shows it,
// holds that tofu's (env) does not: finding any of it in what a module read
// means the module read this process's environment.
func serverOnlyEnv(t *testing.T, env []string) []string {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/environ")
	require.NoError(t, err)
	given := map[string]bool{proctree.OwnerEnv: true, proctree.RootEnv: true}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		given[k] = true
	}
	var only []string
	for _, kv := range strings.Split(string(raw), "\x00") {
		k, _, ok := strings.Cut(kv, "=")
		if ok && !given[k] && len(kv) > len(k)+4 {
			only = append(only, kv)
		}
	}
	require.NotEmpty(t, only, "this test's environment has nothing tofu's lacks")
	return only
}
