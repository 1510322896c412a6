package tofutest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Runner runs the real tofu in a clean environment: the mirror's CLI
// config set explicitly, a shared plugin cache so the providers are
// unpacked once.
type Runner struct {
	Bin, CLIConfig, PluginCache string
	// Env is added to every run's environment (a provider's credentials,
	// TF_ENCRYPTION).
	Env []string
}

// NewRunner returns a Runner of the tools (Tools) with a CLI config of the
// mirror (CLIConfig) and a fresh plugin cache.
func NewRunner(t testing.TB) *Runner {
	t.Helper()
	bin, mirror := Tools(t)
	return NewRunnerWith(t, bin, mirror)
}

// NewRunnerWith is NewRunner for a given binary and mirror (a mirror
// WithProvider extended).
func NewRunnerWith(t testing.TB, bin, mirror string) *Runner {
	t.Helper()
	return &Runner{Bin: bin, CLIConfig: CLIConfig(t, mirror), PluginCache: t.TempDir()}
}

// Run runs tofu with args in dir (within 3 minutes) and returns its
// standard output, failing the test with both outputs when tofu fails.
func (r *Runner) Run(t testing.TB, dir string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.Bin, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + dir,
		"TF_CLI_CONFIG_FILE=" + r.CLIConfig,
		"TF_PLUGIN_CACHE_DIR=" + r.PluginCache,
		"TF_IN_AUTOMATION=1",
		"CHECKPOINT_DISABLE=1",
	}, r.Env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tofu %s: %v\n%s\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.Bytes()
}

// ModuleFiles reads a module directory's files as `rezusctl create provider
// --from-dir` does (the .tf and .tf.json files, by name), failing the test
// when it holds none.
func ModuleFiles(t testing.TB, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("reading module %s: %v", dir, err)
	}
	files := map[string]string{}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tf") || strings.HasSuffix(e.Name(), ".tf.json") {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatalf("reading module %s: %v", dir, err)
			}
			files[e.Name()] = string(b)
		}
	}
	if len(files) == 0 {
		t.Fatalf("module %s holds no .tf or .tf.json file", dir)
	}
	return files
}
