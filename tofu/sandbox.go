package tofu

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
)

// Sandbox says what tofu, and the providers it starts, must not see: a
// module is code a Provider's author wrote, and its functions read files
// (`file()`, `filebase64()`): a module made `tofu validate` print the seal
// key, the NATS operator seed and the server's full-access credentials,
// which every role could then read (issue 27). In the sandbox each Hide
// directory is an empty one and each HideFile is empty, but for what a run
// needs: its own work dir, its HOME, its CLI config, the plugin caches, the
// provider mirror and the tofu binary. Other tenants' work dirs are under
// the hidden data dir, so they are hidden too.
//
// /proc was the server's, and so a way around all of it: the server's root
// (/proc/<pid>/root), working dir, open files and environment are there
// (issue 42). On Linux the sandbox is a mount and a PID namespace of tofu's
// own, with a /proc of that namespace, set up by this binary re-executed as
// its first process (see sandbox_linux.go); as root directly, else inside a
// user namespace. tofu runs there without any capability. Elsewhere a
// configured Sandbox makes runs fail.
type Sandbox struct {
	// Hide are directories (the data dir) shown empty to tofu.
	Hide []string
	// HideFiles are files outside them (the seal key file, the TLS key, NATS
	// credentials, the single sign-on client secret) shown empty.
	HideFiles []string
	// Keep are paths under Hide tofu still needs besides those a run names
	// (the plugin caches).
	Keep []string
}

// sandboxSpec is what the re-executed binary is told, in sandboxEnv.
type sandboxSpec struct {
	Hide      []string `json:"hide"`
	HideFiles []string `json:"hideFiles"`
	Keep      []string `json:"keep"`
	Bin       string   `json:"bin"`
	Dir       string   `json:"dir"`
}

// sandboxEnv carries the spec to the re-executed binary; it is removed from
// the environment before tofu starts.
const sandboxEnv = "REZUSCLOUD_TOFU_SANDBOX"

// spec is the sandbox of one run of bin in dir with env.
func (s *Sandbox) spec(bin, dir, mirror string, env []string) sandboxSpec {
	keep := append([]string{dir, bin}, s.Keep...)
	if mirror != "" {
		keep = append(keep, mirror)
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if (k == "HOME" || k == "TF_CLI_CONFIG_FILE" || k == "TF_PLUGIN_CACHE_DIR") && filepath.IsAbs(v) {
			keep = append(keep, v)
		}
	}
	slices.Sort(keep)
	return sandboxSpec{Hide: s.Hide, HideFiles: s.HideFiles, Keep: slices.Compact(keep), Bin: bin, Dir: dir}
}

func (sp sandboxSpec) encode() string {
	b, _ := json.Marshal(sp)
	return string(b)
}
