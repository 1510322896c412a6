package tofutest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeTB records a Fatalf and ends its goroutine, as testing.T does.
type fakeTB struct {
	testing.TB
	dir    string
	failed string
}

func (f *fakeTB) Helper()         {}
func (f *fakeTB) TempDir() string { return f.dir }
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// runFake runs fn with a fakeTB on its own goroutine and returns it.
func runFake(t *testing.T, fn func(tb testing.TB)) *fakeTB {
	f := &fakeTB{TB: t, dir: t.TempDir()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f
}

func writeExecutable(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\n"), mode))
}

func TestTools(t *testing.T) {
	dir := t.TempDir()
	tofu := filepath.Join(dir, "bin", "tofu")
	writeExecutable(t, tofu, 0o755)
	mirror := filepath.Join(dir, "mirror")
	require.NoError(t, os.MkdirAll(mirror, 0o755))
	plain := filepath.Join(dir, "plain")
	writeExecutable(t, plain, 0o644)

	tests := []struct {
		name                   string
		tofu, mirror, toolsDir string
		wantTofu, wantMirror   string
		wantFail               string
	}{
		{name: "from the environment", tofu: tofu, mirror: mirror, wantTofu: tofu, wantMirror: mirror},
		{name: "from REZUS_TOOLS_DIR", toolsDir: dir, wantTofu: tofu, wantMirror: mirror},
		{name: "missing tofu", tofu: filepath.Join(dir, "nope"), mirror: mirror,
			wantFail: "no OpenTofu executable at " + filepath.Join(dir, "nope")},
		{name: "tofu not executable", tofu: plain, mirror: mirror, wantFail: "no OpenTofu executable at " + plain},
		{name: "tofu is a directory", tofu: mirror, mirror: mirror, wantFail: "no OpenTofu executable at " + mirror},
		{name: "missing mirror", tofu: tofu, mirror: filepath.Join(dir, "nope"),
			wantFail: "no provider mirror at " + filepath.Join(dir, "nope")},
		{name: "missing tools dir", toolsDir: filepath.Join(dir, "empty"),
			wantFail: "no OpenTofu executable at " + filepath.Join(dir, "empty", "bin", "tofu")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvTofu, tt.tofu)
			t.Setenv(EnvMirror, tt.mirror)
			t.Setenv(EnvToolsDir, tt.toolsDir)
			var gotTofu, gotMirror string
			f := runFake(t, func(tb testing.TB) { gotTofu, gotMirror = Tools(tb) })
			if tt.wantFail != "" {
				require.Contains(t, f.failed, tt.wantFail)
				require.Contains(t, f.failed, "run `go tool task tools`")
				return
			}
			require.Empty(t, f.failed)
			require.Equal(t, tt.wantTofu, gotTofu)
			require.Equal(t, tt.wantMirror, gotMirror)
		})
	}
}

func TestRepoRoot(t *testing.T) {
	root, err := RepoRoot()
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "go.mod"))
	require.DirExists(t, filepath.Join(root, "internal", "tofutest"))
}

func TestCLIConfig(t *testing.T) {
	mirror := t.TempDir()
	for _, p := range []string{
		"registry.opentofu.org/siderolabs/talos/0.8.0/linux_amd64/terraform-provider-talos_v0.8.0",
		"registry.opentofu.org/rezuscloud/emulated/0.1.0/linux_amd64/terraform-provider-emulated_v0.1.0",
	} {
		writeExecutable(t, filepath.Join(mirror, p), 0o755)
	}
	providers, err := MirrorProviders(mirror)
	require.NoError(t, err)
	require.Equal(t, []string{"registry.opentofu.org/rezuscloud/emulated", "registry.opentofu.org/siderolabs/talos"}, providers)

	tests := []struct {
		name, mirror, want string
	}{
		{"with providers", mirror, `provider_installation {
  filesystem_mirror {
    path = "` + mirror + `"
    include = ["registry.opentofu.org/rezuscloud/emulated", "registry.opentofu.org/siderolabs/talos"]
  }
  direct {
    exclude = ["registry.opentofu.org/rezuscloud/emulated", "registry.opentofu.org/siderolabs/talos"]
  }
}
`},
		{"empty mirror", "/nowhere", `provider_installation {
  filesystem_mirror {
    path = "/nowhere"
  }
  direct {
  }
}
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := CLIConfig(t, tt.mirror)
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, tt.want, string(b))
		})
	}
}

func TestRequireProvider(t *testing.T) {
	mirror := t.TempDir()
	platform := runtime.GOOS + "_" + runtime.GOARCH
	writeExecutable(t, filepath.Join(mirror, "registry.opentofu.org/hetznercloud/hcloud/1.52.0", platform, "terraform-provider-hcloud_v1.52.0"), 0o755)
	writeExecutable(t, filepath.Join(mirror, "registry.opentofu.org/siderolabs/talos/0.8.0", platform, "terraform-provider-talos_v0.8.0"), 0o644)

	tests := []struct {
		name, source, version, wantFail string
	}{
		{"present", "registry.opentofu.org/hetznercloud/hcloud", "1.52.0", ""},
		{"another version", "registry.opentofu.org/hetznercloud/hcloud", "1.53.0", "has no registry.opentofu.org/hetznercloud/hcloud 1.53.0"},
		{"missing", "registry.opentofu.org/oracle/oci", "6.34.0", "has no registry.opentofu.org/oracle/oci 6.34.0"},
		{"not executable", "registry.opentofu.org/siderolabs/talos", "0.8.0", "has no registry.opentofu.org/siderolabs/talos 0.8.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := runFake(t, func(tb testing.TB) { RequireProvider(tb, mirror, tt.source, tt.version) })
			if tt.wantFail == "" {
				require.Empty(t, f.failed)
				return
			}
			require.Contains(t, f.failed, tt.wantFail)
			require.Contains(t, f.failed, "run `go tool task tools`")
		})
	}
}

func TestWithProvider(t *testing.T) {
	mirror := t.TempDir()
	platform := runtime.GOOS + "_" + runtime.GOARCH
	talos := filepath.Join(mirror, "registry.opentofu.org/siderolabs/talos/0.8.0", platform, "terraform-provider-talos_v0.8.0")
	stale := filepath.Join(mirror, "registry.opentofu.org/rezuscloud/emulated/0.0.9", platform, "terraform-provider-emulated_v0.0.9")
	writeExecutable(t, talos, 0o755)
	writeExecutable(t, stale, 0o755)

	out := WithProvider(t, mirror, "registry.opentofu.org/rezuscloud/emulated", "0.1.0", "./cmd/terraform-provider-emulated")
	linked := filepath.Join(out, "registry.opentofu.org/siderolabs/talos/0.8.0", platform, "terraform-provider-talos_v0.8.0")
	target, err := os.Readlink(linked)
	require.NoError(t, err)
	require.Equal(t, talos, target)
	require.NoFileExists(t, filepath.Join(out, "registry.opentofu.org/rezuscloud/emulated/0.0.9", platform, "terraform-provider-emulated_v0.0.9"),
		"the mirror's own build of the provider is left out")
	fi, err := os.Stat(filepath.Join(out, "registry.opentofu.org/rezuscloud/emulated/0.1.0", platform, "terraform-provider-emulated_v0.1.0"))
	require.NoError(t, err)
	require.NotZero(t, fi.Mode()&0o111, "an executable")
}
