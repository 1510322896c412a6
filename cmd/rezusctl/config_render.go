package main

import (
	"fmt"
	"net/http"
	"net/url"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/domain"
)

// configRenderCommand is `config render machine/NAME` (or nodegroup/NAME):
// the Talos machine config the server renders from the tenant's PKI, the
// node group and the ConfigPatches, from GET …/machines/{name}/config.
func (r *rezusctl) configRenderCommand() *cli.Command {
	return &cli.Command{
		Name:      "render",
		Usage:     "print the Talos machine config the server renders for a machine or a node group",
		ArgsUsage: "machine/NAME | nodegroup/NAME",
		Description: "The tenant's keys, tokens and secrets are left out (their values are empty; a comment at the top\n" +
			"names them). A global admin gets them with --include-secrets (audited): write that to a file (-o,\n" +
			"mode 0600) rather than a terminal you share. --diff PATCH shows what a ConfigPatch (even a disabled\n" +
			"one) would change instead.\n\n" +
			"  rezusctl config render machine/cp-1 -t acme -o cp-1.yaml\n" +
			"  rezusctl config render nodegroup/workers -t acme --diff more-pods",
		Flags: []cli.Flag{
			tenantFlag(),
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "`FILE` to write (mode 0600); default stdout"},
			&cli.StringFlag{Name: "diff", Usage: "the unified diff a ConfigPatch `NAME` makes, instead of the config"},
			&cli.BoolFlag{Name: "include-secrets", Usage: "keep the tenant's keys and tokens (global admins only; audited)"},
		},
		Action: func(c *cli.Context) error {
			k, name, err := typedName(c, domain.MachineKind.Plural, domain.NodeGroupKind.Plural)
			if err != nil {
				return err
			}
			s, cl, err := r.connect(c)
			if err != nil {
				return err
			}
			tenant, err := requireTenant(s, c)
			if err != nil {
				return err
			}
			q := url.Values{}
			if p := c.String("diff"); p != "" {
				q.Set("diff", p)
			}
			if c.Bool("include-secrets") {
				q.Set("includeSecrets", "true")
			}
			var body []byte
			if err := cl.call(c.Context, request{method: http.MethodGet, path: k.itemPath(tenant, name) + "/config", query: q,
				header: http.Header{"Accept": {"text/yaml, text/x-diff, */*;q=0.8"}}}, &body); err != nil {
				return err
			}
			out := c.String("output")
			if out == "" || out == "-" {
				_, err := r.env.Stdout.Write(body)
				return err
			}
			if err := writeFileAtomic(out, body); err != nil {
				return err
			}
			fmt.Fprintf(r.env.Stdout, "wrote the config of %s to %s\n", k.ref(tenant, name), out)
			return nil
		},
	}
}
