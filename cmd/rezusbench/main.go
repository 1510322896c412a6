// Command rezusbench is the load generator behind docs/benchmarks.md. It
// starts a rezuscloud server as a child process on a temporary data dir and
// measures it from outside, as clients see it; it lives apart from the
// server binary so that what ships carries no load generator.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/urfave/cli/v2"
)

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "rezusbench:", err)
		os.Exit(1)
	}
}

func newApp() *cli.App {
	return &cli.App{
		Name:  "rezusbench",
		Usage: "measure a RezusCloud server (figures for docs/benchmarks.md)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "server", EnvVars: []string{"REZUSBENCH_SERVER"},
				Usage: "the rezuscloud binary to start (default: rezuscloud beside this binary, else on PATH)"},
		},
		Commands: []*cli.Command{
			apiCommand(),
			abCommand(),
			appliesCommand(),
			autoscaleCommand(),
			driftCommand(),
			fleetCommand(),
			cpuPhasesCommand(),
		},
	}
}

// serverBinary is the rezuscloud executable to measure: --server, or the one
// built beside this binary (`go tool task bench` builds both into bin/), or
// the one on PATH.
func serverBinary(c *cli.Context) (string, error) {
	if p := c.String("server"); p != "" {
		return p, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "rezuscloud")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	p, err := exec.LookPath("rezuscloud")
	if err != nil {
		return "", fmt.Errorf("no rezuscloud binary beside rezusbench or on PATH: pass --server")
	}
	return p, nil
}
