package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
	"golang.org/x/sync/errgroup"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/providers"
)

// The emulator apart (issue 49): `rezuscloud emulator` runs the Talos node
// emulator as its own process and `serve --emulator-env <its api.env>`
// builds on it, so a server's RSS and CPU are its own (and its tofu's), not
// the nodes'. `serve --with-emulator` still runs it in-process.

// Lines of api.env besides the Provider's credentials: what a server needs
// to know of an emulator it does not run.
const (
	// emulatorLightEnv is "true" when the nodes run no Kubernetes.
	emulatorLightEnv = "REZUSCLOUD_EMULATOR_LIGHT"
	// emulatorKubeVersionsEnv lists the Kubernetes versions the nodes can
	// run (comma-separated; empty: any).
	emulatorKubeVersionsEnv = "REZUSCLOUD_EMULATOR_KUBERNETES_VERSIONS"
)

func emulatorCommand() *cli.Command {
	return &cli.Command{
		Name:  "emulator",
		Usage: "run the Talos node emulator as its own process, for `serve --emulator-env <data-dir>/emulator/api.env`",
		Description: "Runs the emulator `serve --with-emulator` runs in-process: nodes under <data-dir>/emulator, its HTTP\n" +
			"API on --listen, and <data-dir>/emulator/api.env (mode 0600) with the API's URL and token and what\n" +
			"its nodes run, which `serve --emulator-env` reads to register the Provider `emulated` on it.\n" +
			"Start it first; stop it with SIGTERM or Ctrl-C.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data-dir", Required: true, EnvVars: []string{"REZUSCLOUD_EMULATOR_DATA_DIR"}, Usage: "where the nodes and api.env live (<data-dir>/emulator)"},
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:0", EnvVars: []string{"REZUSCLOUD_EMULATOR_LISTEN"}, Usage: "the emulator's HTTP API address"},
			&cli.StringFlag{Name: "emulator-kube", Value: "auto", EnvVars: []string{"REZUSCLOUD_EMULATOR_KUBE"}, Usage: "run a real Kubernetes control plane on emulated control planes: on, off or auto (as serve's flag)"},
			&cli.StringFlag{Name: "kube-tools", Value: ".tools", EnvVars: []string{"REZUSCLOUD_KUBE_TOOLS"}, Usage: "where hack/kube.sh built etcd and the Kubernetes binaries"},
			&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"REZUSCLOUD_LOG_LEVEL"}, Usage: "debug, info, warn or error"},
		},
		Action: func(c *cli.Context) error {
			log, err := newLogger(c.String("log-level"))
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			dir, err := filepath.Abs(c.String("data-dir"))
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Join(dir, "emulator"), 0o700); err != nil {
				return err
			}
			infra := infraConfig{EmulatorKube: c.String("emulator-kube"), KubeTools: c.String("kube-tools"), EmulatorListen: c.String("listen")}
			g, gctx := errgroup.WithContext(ctx)
			if _, err := startEmulator(gctx, log, dir, infra, g.Go); err != nil {
				stop()
				_ = g.Wait()
				return err
			}
			return g.Wait()
		},
	}
}

// emulatorEnvFile is the content of api.env: the Provider's credentials
// and what the nodes run.
func emulatorEnvFile(api emulatorAPI, light bool) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s=%s\n%s=%s\n", providers.EmulatorEndpointEnv, api.URL, providers.EmulatorTokenEnv, api.Token)
	fmt.Fprintf(&b, "%s=%t\n", emulatorLightEnv, light)
	if api.Versions != nil {
		fmt.Fprintf(&b, "%s=%s\n", emulatorKubeVersionsEnv, strings.Join(api.Versions.Kubernetes, ","))
	}
	return b.Bytes()
}

// apartEmulator is an emulator serve builds on but does not run.
type apartEmulator struct {
	API   emulatorAPI
	Light bool
}

// readEmulatorEnv reads the api.env of an emulator run apart.
func readEmulatorEnv(path string) (*apartEmulator, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--emulator-env: %w (start `rezuscloud emulator --data-dir D` first; it writes D/emulator/api.env)", err)
	}
	vals := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "="); ok {
			vals[k] = v
		}
	}
	e := &apartEmulator{API: emulatorAPI{URL: vals[providers.EmulatorEndpointEnv], Token: vals[providers.EmulatorTokenEnv]},
		Light: vals[emulatorLightEnv] == "true"}
	if e.API.URL == "" || e.API.Token == "" {
		return nil, fmt.Errorf("--emulator-env %s: no %s and %s in it", path, providers.EmulatorEndpointEnv, providers.EmulatorTokenEnv)
	}
	if vs := vals[emulatorKubeVersionsEnv]; vs != "" {
		e.API.Versions = &domain.ProviderVersions{Kubernetes: strings.Split(vs, ",")}
	}
	return e, nil
}
