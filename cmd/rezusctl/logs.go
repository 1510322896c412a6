package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/domain"
)

// logsCommand prints an apply's tofu log: GET …/applies/{name}/log, with
// --follow streamed until the run ends.
func (r *rezusctl) logsCommand() *cli.Command {
	return &cli.Command{
		Name:      "logs",
		Usage:     "print an apply's tofu log (the tenant's newest apply unless one is named), or a machine's logs",
		ArgsUsage: "[APPLY | apply/APPLY | machine/MACHINE]",
		Description: "  rezusctl logs -t acme            # the newest apply's log\n" +
			"  rezusctl logs -t acme -f         # follow it while it runs\n" +
			"  rezusctl logs -t acme apply-1795990602680\n" +
			machineLogsHelp,
		Flags: append([]cli.Flag{
			tenantFlag(),
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "stream the log until the run ends"},
		}, machineLogFlags()...),
		Action: func(c *cli.Context) error {
			if name, ok, err := machineLogTarget(c); err != nil || ok {
				if err != nil {
					return err
				}
				return r.machineLogs(c, name)
			}
			if c.NArg() > 1 {
				return errors.New("give at most one apply name")
			}
			s, cl, err := r.connect(c)
			if err != nil {
				return err
			}
			tenant := s.tenant(c)
			if tenant == "" {
				return errors.New("give the tenant with --tenant/-t (or set one on the context)")
			}
			name := applyLogName(c.Args().First())
			if name == "" {
				var list struct{ Items []domain.Object }
				if err := cl.call(c.Context, request{method: http.MethodGet, path: "/api/v1/tenants/" + tenant + "/applies"}, &list); err != nil {
					return err
				}
				if len(list.Items) == 0 {
					return fmt.Errorf("tenant %s has no applies yet", tenant)
				}
				sort.Slice(list.Items, func(i, j int) bool {
					return list.Items[i].Metadata.CreationTimestamp.Before(*list.Items[j].Metadata.CreationTimestamp)
				})
				name = list.Items[len(list.Items)-1].Metadata.Name
			}
			q := url.Values{}
			if c.Bool("follow") {
				q.Set("follow", "true")
			}
			resp, err := cl.do(c.Context, request{method: http.MethodGet, path: "/api/v1/tenants/" + tenant + "/applies/" + name + "/log",
				query: q, header: http.Header{"Accept": {"text/plain"}}})
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			_, err = io.Copy(r.env.Stdout, resp.Body)
			if c.Context.Err() != nil {
				return nil
			}
			return err
		},
	}
}
