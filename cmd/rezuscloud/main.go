// Command rezuscloud is the RezusCloud management plane server.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "rezuscloud:", err)
		os.Exit(1)
	}
}

func newApp() *cli.App {
	return &cli.App{
		Name:    "rezuscloud",
		Usage:   "the RezusCloud management plane for Talos Linux Kubernetes clusters",
		Version: version,
		Commands: []*cli.Command{
			serveCommand(),
			rebuildCommand(),
			backupCommand(),
			restoreCommand(),
		},
	}
}
