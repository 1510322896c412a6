package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/urfave/cli/v2"
)

// maintenanceCommand opens a tenant's maintenance windows by hand for a
// while (spec.maintenance.openUntil), and closes them again.
func (r *rezusctl) maintenanceCommand() *cli.Command {
	patch := func(c *cli.Context, until any, say string) error {
		if c.NArg() != 1 {
			return fmt.Errorf("give the tenant: rezusctl maintenance %s TENANT", c.Command.Name)
		}
		tenant := c.Args().First()
		_, cl, err := r.connect(c)
		if err != nil {
			return err
		}
		k, err := resolveKind("tenants")
		if err != nil {
			return err
		}
		body, _ := json.Marshal(map[string]any{"spec": map[string]any{"maintenance": map[string]any{"openUntil": until}}})
		if err := cl.call(c.Context, request{method: http.MethodPatch, path: k.itemPath("", tenant), body: body, contentType: "application/merge-patch+json"}, nil); err != nil {
			return err
		}
		fmt.Fprintf(r.env.Stdout, "tenant/%s: %s\n", tenant, say)
		return nil
	}
	return &cli.Command{
		Name:  "maintenance",
		Usage: "open a tenant's maintenance windows now, for a while, or close them again",
		Description: "Work that waits for a tenant's maintenance window (spec.maintenance.windows) — config changes\n" +
			"that reboot, replacements marked waitForMaintenance, upgrades — starts while the window is open.\n" +
			"`open` sets spec.maintenance.openUntil (an explicit override, in the audit log like every write);\n" +
			"`close` removes it.\n\n" +
			"  rezusctl maintenance open acme --for 2h\n  rezusctl maintenance close acme",
		Subcommands: []*cli.Command{
			{
				Name: "open", Usage: "open the windows now", ArgsUsage: "TENANT",
				Flags: []cli.Flag{&cli.DurationFlag{Name: "for", Value: time.Hour, Usage: "how long they stay open (at most 7 days)"}},
				Action: func(c *cli.Context) error {
					d := c.Duration("for")
					if d <= 0 || d > 7*24*time.Hour {
						return fmt.Errorf("--for %s: give a duration between 1s and 168h", d)
					}
					until := time.Now().Add(d).UTC().Truncate(time.Second)
					return patch(c, until.Format(time.RFC3339), "maintenance open until "+until.Format(time.RFC3339))
				},
			},
			{
				Name: "close", Usage: "close what open opened", ArgsUsage: "TENANT",
				Action: func(c *cli.Context) error { return patch(c, nil, "maintenance windows as declared") },
			},
		},
	}
}
