// Package tofutest finds the OpenTofu binary and the provider filesystem
// mirror that `go tool task tools` builds (hack/tools.sh), for tests that run
// real tofu. Only tests import it.
//
// Where it looks, first match wins:
//
//	tofu:   $REZUSCLOUD_TOFU, $REZUS_TOOLS_DIR/bin/tofu, <repo>/.tools/bin/tofu
//	mirror: $REZUSCLOUD_PROVIDER_MIRROR, $REZUS_TOOLS_DIR/mirror, <repo>/.tools/mirror
//
// A missing tool fails the test (never skips it): a test that did not run
// must not count as a pass.
package tofutest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// Environment variables naming the tools.
const (
	EnvTofu     = "REZUSCLOUD_TOFU"
	EnvMirror   = "REZUSCLOUD_PROVIDER_MIRROR"
	EnvToolsDir = "REZUS_TOOLS_DIR"
)

const buildHint = "run `go tool task tools` (it builds OpenTofu and the provider mirror into ./.tools)"

// Tools returns the paths of the tofu binary and of the provider mirror,
// failing the test if either is missing.
func Tools(t testing.TB) (tofu, mirror string) {
	t.Helper()
	tofu, mirror, err := find()
	if err != nil {
		t.Fatalf("%v: %s", err, buildHint)
	}
	return tofu, mirror
}

// RequireProvider fails the test unless the mirror holds the provider source
// (host/namespace/type) at version for this platform. A provider added to
// hack/tools.sh is missing from a mirror built before it was added, until
// `go tool task tools` runs again.
func RequireProvider(t testing.TB, mirror, source, version string) {
	t.Helper()
	bin := ProviderPath(mirror, source, version)
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		t.Fatalf("the provider mirror %s has no %s %s (no executable %s): %s", mirror, source, version, bin, buildHint)
	}
}

// ProviderPath is where a filesystem mirror (unpacked layout) holds the
// binary of provider source (host/namespace/type) at version for this
// platform.
func ProviderPath(mirror, source, version string) string {
	typ := source[strings.LastIndex(source, "/")+1:]
	return filepath.Join(mirror, filepath.FromSlash(source), version, runtime.GOOS+"_"+runtime.GOARCH, "terraform-provider-"+typ+"_v"+version)
}

func find() (tofu, mirror string, err error) {
	tofu, mirror = os.Getenv(EnvTofu), os.Getenv(EnvMirror)
	if tofu == "" || mirror == "" {
		dir, err := ToolsDir()
		if err != nil {
			return "", "", err
		}
		if tofu == "" {
			tofu = filepath.Join(dir, "bin", "tofu")
		}
		if mirror == "" {
			mirror = filepath.Join(dir, "mirror")
		}
	}
	if fi, err := os.Stat(tofu); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", "", fmt.Errorf("no OpenTofu executable at %s (set %s to override)", tofu, EnvTofu)
	}
	if fi, err := os.Stat(mirror); err != nil || !fi.IsDir() {
		return "", "", fmt.Errorf("no provider mirror at %s (set %s to override)", mirror, EnvMirror)
	}
	abs, err := filepath.Abs(tofu)
	if err != nil {
		return "", "", err
	}
	absMirror, err := filepath.Abs(mirror)
	if err != nil {
		return "", "", err
	}
	return abs, absMirror, nil
}

// ToolsDir is the directory `go tool task tools` builds into:
// $REZUS_TOOLS_DIR, else .tools, a relative one taken from the repository
// root (where the Taskfile runs), absolute.
func ToolsDir() (string, error) {
	dir := os.Getenv(EnvToolsDir)
	if dir == "" {
		dir = ".tools"
	}
	if !filepath.IsAbs(dir) {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, dir)
	}
	return dir, nil
}

// RepoRoot returns the directory of the go.mod above the working directory
// (a test runs in its package's directory).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// CLIConfig writes a tofu CLI config into t.TempDir() that installs the
// mirror's providers from it and every other provider directly from its
// registry, and returns its path (for TF_CLI_CONFIG_FILE, which every tofu a
// test runs must set: a machine may preset it to a missing file).
func CLIConfig(t testing.TB, mirror string) string {
	t.Helper()
	providers, err := MirrorProviders(mirror)
	if err != nil {
		t.Fatalf("reading the provider mirror: %v", err)
	}
	var b strings.Builder
	b.WriteString("provider_installation {\n")
	fmt.Fprintf(&b, "  filesystem_mirror {\n    path = %q\n", mirror)
	if len(providers) > 0 {
		fmt.Fprintf(&b, "    include = %s\n", hclList(providers))
	}
	b.WriteString("  }\n  direct {\n")
	if len(providers) > 0 {
		fmt.Fprintf(&b, "    exclude = %s\n", hclList(providers))
	}
	b.WriteString("  }\n}\n")
	path := filepath.Join(t.TempDir(), "tofurc")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatalf("writing the tofu CLI config: %v", err)
	}
	return path
}

// MirrorProviders lists the provider addresses (host/namespace/type) a
// filesystem mirror holds, sorted.
func MirrorProviders(mirror string) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(mirror, "*", "*", "*"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range matches {
		if fi, err := os.Stat(m); err != nil || !fi.IsDir() {
			continue
		}
		rel, err := filepath.Rel(mirror, m)
		if err != nil {
			return nil, err
		}
		out = append(out, filepath.ToSlash(rel))
	}
	sort.Strings(out)
	return out, nil
}

func hclList(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// WithProvider returns a new mirror in t.TempDir() holding mirror's providers
// (linked) and, as source (host/namespace/type) at version, the command pkg of
// this module built from the working tree, so a test runs the provider code it
// tests rather than whatever the tools mirror was last built from.
func WithProvider(t testing.TB, mirror, source, version, pkg string) string {
	t.Helper()
	out := t.TempDir()
	err := filepath.Walk(mirror, func(path string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, err := filepath.Rel(mirror, path)
		if err != nil {
			return err
		}
		if strings.HasPrefix(filepath.ToSlash(rel), source+"/") {
			return nil
		}
		dst := filepath.Join(out, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.Symlink(path, dst)
	})
	if err != nil {
		t.Fatalf("linking the provider mirror: %v", err)
	}
	bin := ProviderPath(out, source, version)
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goBin(), "build", "-o", bin, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, b)
	}
	return out
}

func goBin() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(os.Getenv("GOROOT"), "bin", "go")
}

// EnvTalosctl names a talosctl binary to use instead of the tools dir's.
const EnvTalosctl = "REZUSCLOUD_TALOSCTL"

// Talosctl finds the real talosctl that `go tool task tools` builds
// (hack/talosctl.sh): $REZUSCLOUD_TALOSCTL, else bin/talosctl of the tools
// dir (ToolsDir). A missing one fails the test, as a missing tofu does: a
// test that did not run must not count as a pass.
func Talosctl(t testing.TB) string {
	t.Helper()
	path := os.Getenv(EnvTalosctl)
	if path == "" {
		dir, err := ToolsDir()
		if err != nil {
			t.Fatalf("finding the tools dir: %v", err)
		}
		path = filepath.Join(dir, "bin", "talosctl")
	}
	if fi, err := os.Stat(path); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		t.Fatalf("no talosctl executable at %s (set %s to override): run `go tool task tools` (it builds talosctl v1.13.0 into ./.tools)", path, EnvTalosctl)
	}
	return path
}
