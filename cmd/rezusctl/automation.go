package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"text/tabwriter"

	"github.com/urfave/cli/v2"
)

// automationCredential is the server's answer about NATS credentials for automation.
type automationCredential struct {
	Metadata struct {
		Name              string `json:"name"`
		CreationTimestamp string `json:"creationTimestamp"`
	} `json:"metadata"`
	Status struct {
		PublicKey string `json:"publicKey"`
		Creator   string `json:"creator"`
	} `json:"status"`
	Creds   string `json:"creds"`
	NATSURL string `json:"natsURL"`
}

// automationCommand manages NATS credentials that let external automation
// subscribe to resource events (admins only).
func (r *rezusctl) automationCommand() *cli.Command {
	return &cli.Command{
		Name:  "automation-credentials",
		Usage: "issue, list and revoke NATS credentials for external automation (admins)",
		Subcommands: []*cli.Command{
			{
				Name:      "create",
				Usage:     "issue credentials and write the .creds file (mode 0600); shown once",
				ArgsUsage: "NAME",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "`FILE` to write (default NAME.creds), or - for stdout"},
				},
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return errors.New("give the credentials a name: rezusctl automation-credentials create NAME")
					}
					name := c.Args().First()
					_, cl, err := r.connect(c)
					if err != nil {
						return err
					}
					body, _ := json.Marshal(map[string]any{"metadata": map[string]string{"name": name}})
					var cred automationCredential
					if err := cl.call(c.Context, request{method: http.MethodPost, path: "/api/v1/automation-credentials", body: body}, &cred); err != nil {
						return err
					}
					out := c.String("output")
					if out == "-" {
						_, err := fmt.Fprint(r.env.Stdout, cred.Creds)
						return err
					}
					if out == "" {
						out = name + ".creds"
					}
					if err := writeFileAtomic(out, []byte(cred.Creds)); err != nil {
						return err
					}
					fmt.Fprintf(r.env.Stdout, "wrote the credentials %q to %s (they are not shown again)\n", name, out)
					if cred.NATSURL != "" {
						fmt.Fprintf(r.env.Stdout, "connect with: nats --server %s --creds %s sub 'rezus.evt.>'\n", cred.NATSURL, out)
					} else {
						fmt.Fprintln(r.env.Stdout, "the server has no NATS listener; start it with --nats-listen to use them")
					}
					return nil
				},
			},
			{
				Name:  "list",
				Usage: "list issued credentials (names and public keys, never secrets)",
				Action: func(c *cli.Context) error {
					_, cl, err := r.connect(c)
					if err != nil {
						return err
					}
					var list struct {
						Items []automationCredential `json:"items"`
					}
					if err := cl.call(c.Context, request{method: http.MethodGet, path: "/api/v1/automation-credentials"}, &list); err != nil {
						return err
					}
					w := tabwriter.NewWriter(r.env.Stdout, 0, 4, 3, ' ', 0)
					fmt.Fprintln(w, "NAME\tCREATOR\tCREATED\tPUBLIC KEY")
					for _, it := range list.Items {
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", it.Metadata.Name, it.Status.Creator, it.Metadata.CreationTimestamp, it.Status.PublicKey)
					}
					return w.Flush()
				},
			},
			{
				Name:      "delete",
				Usage:     "revoke credentials: connected clients are cut off at once",
				ArgsUsage: "NAME",
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return errors.New("give the name of the credentials to revoke")
					}
					_, cl, err := r.connect(c)
					if err != nil {
						return err
					}
					if err := cl.call(c.Context, request{method: http.MethodDelete, path: "/api/v1/automation-credentials/" + c.Args().First()}, nil); err != nil {
						return err
					}
					fmt.Fprintf(r.env.Stdout, "automation credentials %q revoked\n", c.Args().First())
					return nil
				},
			},
		},
	}
}
