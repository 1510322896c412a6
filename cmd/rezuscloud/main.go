// Command rezuscloud is the RezusCloud management plane server.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/internal/buildinfo"
)

// version, commit and date may be stamped at build time with -ldflags "-X
// main.version=... -X main.commit=... -X main.date=..." (go tool task
// release); an empty version is internal/buildinfo/VERSION's.
var version, commit, date string

// build is this binary's build: its release, commit and date.
func build() buildinfo.Info { return buildinfo.Get(version, commit, date) }

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
		Version: build().String(),
		Commands: []*cli.Command{
			serveCommand(),
			rebuildCommand(),
			backupCommand(),
			restoreCommand(),
			natsCredsCommand(),
			emulatorCommand(),
		},
	}
}
