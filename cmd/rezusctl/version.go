package main

import (
	"fmt"
	"net/http"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/internal/buildinfo"
)

// commit and date are set at build time with -ldflags "-X main.commit=...
// -X main.date=..." (go tool task release), beside main.version.
var commit, date string

func (r *rezusctl) versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the client's version, commit and build date, and the server's version",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "client", Usage: "only the client's version"}},
		Action: func(c *cli.Context) error {
			fmt.Fprintf(r.env.Stdout, "Client Version: %s\n", buildinfo.Get(version, commit, date))
			if c.Bool("client") {
				return nil
			}
			_, cl, err := r.connect(c)
			if err != nil {
				return err
			}
			var v struct {
				Version    string `json:"version"`
				GoVersion  string `json:"goVersion"`
				APIVersion string `json:"apiVersion"`
			}
			if err := cl.call(c.Context, request{method: http.MethodGet, path: "/version"}, &v); err != nil {
				return err
			}
			fmt.Fprintf(r.env.Stdout, "Server Version: %s (%s, API %s)\n", v.Version, v.GoVersion, v.APIVersion)
			return nil
		},
	}
}
