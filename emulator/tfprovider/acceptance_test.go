package tfprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator"
	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// endpointPlaceholder stands for the control plane's address in configs
// rendered before it is reserved; the configuration replaces it, as the
// generated tenant configurations do.
const endpointPlaceholder = "rezus-endpoint.invalid"

// tofuRunner runs real tofu in one working directory with a clean environment.
type tofuRunner struct {
	t       *testing.T
	tofu    string
	dir     string
	cliConf string
	token   string
}

// run runs tofu with args and returns its exit code and combined output; it
// fails the test only if tofu could not run at all.
func (r tofuRunner) run(args ...string) (int, string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.tofu, args...)
	cmd.Dir = r.dir
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + r.dir,
		"TF_CLI_CONFIG_FILE=" + r.cliConf,
		"TF_IN_AUTOMATION=1",
		"TF_INPUT=0",
		"CHECKPOINT_DISABLE=1",
		EnvToken + "=" + r.token,
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), out.String()
	}
	require.NoError(r.t, err, "running tofu %s", strings.Join(args, " "))
	return 0, out.String()
}

// must runs tofu and requires it to succeed.
func (r tofuRunner) must(args ...string) string {
	r.t.Helper()
	code, out := r.run(args...)
	require.Equal(r.t, 0, code, "tofu %s:\n%s", strings.Join(args, " "), out)
	return out
}

// newWorkspace writes main.tf and the variables into a new directory and runs tofu init there;
// tofu gets the emulator's token as RezusCloud hands it over, in the environment.
func newWorkspace(t *testing.T, tofu, cliConf, token, mainTF string, vars map[string]string) tofuRunner {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.tf"), []byte(mainTF), 0o600))
	b, err := json.Marshal(vars)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "vars.auto.tfvars.json"), b, 0o600))
	r := tofuRunner{t: t, tofu: tofu, dir: dir, cliConf: cliConf, token: token}
	r.must("init", "-no-color", "-input=false")
	return r
}

// renderConfigs makes a cluster's control-plane and worker configs with the
// endpoint placeholder as the control plane's host.
func renderConfigs(t *testing.T, cluster string) (controlPlane, worker string) {
	t.Helper()
	bundle, err := secrets.NewBundle(secrets.NewClock(), config.TalosVersionCurrent)
	require.NoError(t, err)
	in, err := generate.NewInput(cluster, "https://"+endpointPlaceholder+":6443", constants.DefaultKubernetesVersion,
		generate.WithSecretsBundle(bundle))
	require.NoError(t, err)
	render := func(typ machine.Type) string {
		cfg, err := in.Config(typ)
		require.NoError(t, err)
		b, err := cfg.Bytes()
		require.NoError(t, err)
		return string(b)
	}
	return render(machine.TypeControlPlane), render(machine.TypeWorker)
}

const providerBlock = `
terraform {
  required_providers {
    emulated = {
      source  = "rezuscloud/emulated"
      version = "0.1.0"
    }
  }
}

variable "endpoint" {
  type = string
}

variable "controlplane_config" {
  type      = string
  sensitive = true
  default   = ""
}

variable "worker_config" {
  type      = string
  sensitive = true
  default   = ""
}

provider "emulated" {
  endpoint = var.endpoint
}
`

const clusterTF = providerBlock + `
resource "emulated_address" "cp" {
  name = "acc-cp"
}

resource "emulated_machine" "cp" {
  name      = "acc-cp-0"
  cluster   = "acc"
  address   = emulated_address.cp.address
  user_data = replace(var.controlplane_config, "` + endpointPlaceholder + `", emulated_address.cp.address)
  lifecycle {
    ignore_changes = [user_data]
  }
}

resource "emulated_machine" "worker" {
  name      = "acc-worker-0"
  cluster   = "acc"
  user_data = replace(var.worker_config, "` + endpointPlaceholder + `", emulated_address.cp.address)
  lifecycle {
    ignore_changes = [user_data]
  }
}

output "cp" {
  value = {
    id            = emulated_machine.cp.id
    address       = emulated_machine.cp.address
    talos_port    = emulated_machine.cp.talos_port
    hostname      = emulated_machine.cp.hostname
    talos_version = emulated_machine.cp.talos_version
    provider_id   = emulated_machine.cp.provider_id
  }
}

output "reserved" {
  value = emulated_address.cp.address
}
`

// TestAcceptance builds a control plane on a reserved address and a worker
// with real tofu and the provider built from this tree, against an
// in-process emulator: apply, a no-change plan, drift, errors, destroy.
func TestAcceptance(t *testing.T) {
	t.Parallel()
	tofu, mirror := tofutest.Tools(t)
	mirror = tofutest.WithProvider(t, mirror, "registry.opentofu.org/rezuscloud/emulated", Version, "./cmd/terraform-provider-emulated")
	cliConf := tofutest.CLIConfig(t, mirror)
	em, endpoint := startEmulator(t, emulator.AddressingLoopback)
	cp, worker := renderConfigs(t, "acc")

	ws := newWorkspace(t, tofu, cliConf, em.APIToken(), clusterTF, map[string]string{
		"endpoint": endpoint, "controlplane_config": cp, "worker_config": worker,
	})
	lock, err := os.ReadFile(filepath.Join(ws.dir, ".terraform.lock.hcl"))
	require.NoError(t, err)
	require.Contains(t, string(lock), `provider "registry.opentofu.org/rezuscloud/emulated"`)

	out := ws.must("apply", "-auto-approve", "-no-color", "-input=false")
	require.Contains(t, out, "Apply complete! Resources: 3 added, 0 changed, 0 destroyed.")
	require.NotContains(t, out, "BEGIN", "a machine config leaked into tofu's output")

	var outputs struct {
		CP struct {
			Value struct {
				ID           string `json:"id"`
				Address      string `json:"address"`
				Hostname     string `json:"hostname"`
				TalosVersion string `json:"talos_version"`
				ProviderID   string `json:"provider_id"`
				TalosPort    int    `json:"talos_port"`
			} `json:"value"`
		} `json:"cp"`
		Reserved struct{ Value string } `json:"reserved"`
	}
	require.NoError(t, json.Unmarshal([]byte(ws.must("output", "-json")), &outputs))
	reserved := outputs.Reserved.Value
	require.NotNil(t, net.ParseIP(reserved), reserved)
	got := outputs.CP.Value
	require.Equal(t, "acc-cp-0", got.ID)
	require.Equal(t, reserved, got.Address)
	require.Equal(t, 50000, got.TalosPort)
	require.Equal(t, "acc-cp-0", got.Hostname)
	require.Equal(t, "emulated://acc-cp-0", got.ProviderID)
	require.Equal(t, "v1.13.0", got.TalosVersion)

	cpNode, err := em.Get("acc-cp-0")
	require.NoError(t, err)
	require.Equal(t, net.JoinHostPort(reserved, "50000"), cpNode.Address, "the control plane boots on the reserved address")
	require.Equal(t, "controlplane", cpNode.Role, "booted with its user data")
	require.Equal(t, "acc", cpNode.Cluster)
	workerNode, err := em.Get("acc-worker-0")
	require.NoError(t, err)
	require.Equal(t, "worker", workerNode.Role)
	require.Equal(t, cpNode.ClusterID, workerNode.ClusterID)
	require.NotEqual(t, cpNode.Address, workerNode.Address)
	addr, err := em.GetAddress("acc-cp")
	require.NoError(t, err)
	require.Equal(t, emulator.Address{Name: "acc-cp", Address: reserved, Node: "acc-cp-0"}, addr)

	code, out := ws.run("plan", "-detailed-exitcode", "-no-color", "-input=false")
	require.Equal(t, 0, code, "a second plan shows no changes:\n%s", out)

	// A machine that vanished behind tofu's back is planned again.
	require.NoError(t, em.Delete("acc-worker-0"))
	code, out = ws.run("plan", "-detailed-exitcode", "-no-color", "-input=false")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "emulated_machine.worker will be created")
	require.Contains(t, out, "Plan: 1 to add, 0 to change, 0 to destroy.")
	ws.must("apply", "-auto-approve", "-no-color", "-input=false")
	_, err = em.Get("acc-worker-0")
	require.NoError(t, err)

	t.Run("emulator errors surface", func(t *testing.T) {
		tests := []struct {
			name     string
			resource string
			want     []string
		}{
			{"duplicate name", `
resource "emulated_machine" "dup" {
  name      = "acc-cp-0"
  user_data = ""
}`, []string{`Could not create emulated machine "acc-cp-0"`, `emulatednode "acc-cp-0" already exists (AlreadyExists, HTTP 409)`}},
			{"unreserved address", `
resource "emulated_machine" "stray" {
  name      = "stray"
  address   = "127.0.254.254"
  user_data = ""
}`, []string{`Could not create emulated machine "stray"`, `127.0.254.254 is not a reserved address`}},
			{"address in use", `
resource "emulated_machine" "second" {
  name      = "second"
  address   = "` + reserved + `"
  user_data = ""
}`, []string{`address ` + reserved + ` (reservation "acc-cp") is in use by node "acc-cp-0"`}},
			{"bad name", `
resource "emulated_address" "bad" {
  name = "Not_A_Label"
}`, []string{`Could not reserve emulated address "Not_A_Label"`, `must be a DNS-1123 label`}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ws := newWorkspace(t, tofu, cliConf, em.APIToken(), providerBlock+tt.resource, map[string]string{"endpoint": endpoint})
				code, out := ws.run("apply", "-auto-approve", "-no-color", "-input=false")
				t.Log(out)
				require.Equal(t, 1, code, out)
				for _, w := range tt.want {
					require.Contains(t, strings.Join(strings.Fields(out), " "), w, out)
				}
			})
		}
	})

	t.Run("an interrupted apply's leftovers are adopted", func(t *testing.T) {
		// What a run killed after the emulator acted but before the state was
		// written leaves behind: a reservation and a node of the cluster.
		a, err := em.ReserveAddress(context.Background(), emulator.AddressSpec{Name: "acc-left"})
		require.NoError(t, err)
		_, err = em.Create(context.Background(), emulator.NodeSpec{Name: "acc-left-0", Cluster: "acc", Address: a.Address})
		require.NoError(t, err)
		main := providerBlock + `
resource "emulated_address" "left" {
  name = "acc-left"
}
resource "emulated_machine" "left" {
  name      = "acc-left-0"
  cluster   = "acc"
  address   = emulated_address.left.address
  user_data = ""
}`
		ws := newWorkspace(t, tofu, cliConf, em.APIToken(), main, map[string]string{"endpoint": endpoint})
		out := ws.must("apply", "-auto-approve", "-no-color", "-input=false")
		flat := strings.Join(strings.Fields(out), " ")
		require.Contains(t, flat, `Adopted existing emulated address "acc-left"`)
		require.Contains(t, flat, `Adopted existing emulated machine "acc-left-0"`)
		code, out := ws.run("plan", "-detailed-exitcode", "-no-color", "-input=false")
		require.Equal(t, 0, code, "adopted resources plan no changes:\n%s", out)
		ws.must("destroy", "-auto-approve", "-no-color", "-input=false")
		_, err = em.Get("acc-left-0")
		require.Error(t, err, "destroy removes the adopted node")
	})

	t.Run("user data updates in place", func(t *testing.T) {
		main := providerBlock + `
resource "emulated_machine" "m" {
  name      = "acc-inplace"
  user_data = var.worker_config
}`
		ws := newWorkspace(t, tofu, cliConf, em.APIToken(), main, map[string]string{"endpoint": endpoint})
		ws.must("apply", "-auto-approve", "-no-color", "-input=false")
		before, err := em.Get("acc-inplace")
		require.NoError(t, err)
		require.Equal(t, emulator.PhaseMaintenance, before.Phase)

		b, err := json.Marshal(map[string]string{"endpoint": endpoint, "worker_config": worker})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(ws.dir, "vars.auto.tfvars.json"), b, 0o600))
		code, out := ws.run("plan", "-detailed-exitcode", "-no-color", "-input=false")
		require.Equal(t, 2, code, out)
		require.Contains(t, out, "emulated_machine.m will be updated in-place")
		require.Contains(t, out, "Plan: 0 to add, 1 to change, 0 to destroy.")
		require.NotContains(t, out, "BEGIN", "the machine config stays hidden")
		ws.must("apply", "-auto-approve", "-no-color", "-input=false")
		after, err := em.Get("acc-inplace")
		require.NoError(t, err)
		require.Equal(t, before, after, "the machine is neither recreated nor reconfigured")
		code, out = ws.run("plan", "-detailed-exitcode", "-no-color", "-input=false")
		require.Equal(t, 0, code, out)
		ws.must("destroy", "-auto-approve", "-no-color", "-input=false")
	})

	t.Run("import by name, delete of a missing machine", func(t *testing.T) {
		a, err := em.ReserveAddress(context.Background(), emulator.AddressSpec{Name: "acc-imported"})
		require.NoError(t, err)
		_, err = em.Create(context.Background(), emulator.NodeSpec{Name: "acc-imported", Cluster: "acc", Address: a.Address})
		require.NoError(t, err)
		main := providerBlock + `
resource "emulated_address" "i" {
  name = "acc-imported"
}

resource "emulated_machine" "i" {
  name      = "acc-imported"
  cluster   = "acc"
  address   = emulated_address.i.address
  user_data = ""
}`
		ws := newWorkspace(t, tofu, cliConf, em.APIToken(), main, map[string]string{"endpoint": endpoint})
		ws.must("import", "-no-color", "-input=false", "emulated_address.i", "acc-imported")
		ws.must("import", "-no-color", "-input=false", "emulated_machine.i", "acc-imported")
		code, out := ws.run("plan", "-detailed-exitcode", "-no-color", "-input=false")
		require.Equal(t, 2, code, out)
		require.Contains(t, out, "Plan: 0 to add, 1 to change, 0 to destroy.", "only the user data, unknown to the API, is set")
		ws.must("apply", "-auto-approve", "-no-color", "-input=false")
		code, out = ws.run("plan", "-detailed-exitcode", "-no-color", "-input=false")
		require.Equal(t, 0, code, out)

		require.NoError(t, em.Delete("acc-imported"))
		out = ws.must("destroy", "-auto-approve", "-no-color", "-input=false", "-refresh=false")
		require.Contains(t, out, "Resources: 2 destroyed.")
		_, err = em.GetAddress("acc-imported")
		require.True(t, domain.IsNotFound(err), "%v", err)
	})

	out = ws.must("destroy", "-auto-approve", "-no-color", "-input=false")
	require.Contains(t, out, "Destroy complete! Resources: 3 destroyed.")
	require.Empty(t, em.List(), "every machine is gone")
	require.Empty(t, em.ListAddresses(), "the reservation is released")
}
