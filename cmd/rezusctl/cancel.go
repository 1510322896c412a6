package main

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/domain"
)

// cancelCommand cancels a running apply (POST …/applies/{name}/cancel: tofu is
// interrupted and the apply ends Canceled) or upgrade (POST
// …/upgrades/{name}/cancel: it stops after the machine it is upgrading).
func (r *rezusctl) cancelCommand() *cli.Command {
	return &cli.Command{
		Name:      "cancel",
		Usage:     "cancel a running apply or upgrade",
		ArgsUsage: "apply/NAME | upgrade/NAME",
		Description: "An apply's tofu run is interrupted (tofu stops safely and releases the state lock); an upgrade\n" +
			"stops after the machine it is upgrading.\n\n" +
			"  rezusctl cancel apply/apply-1795990602680 -t acme\n  rezusctl cancel upgrade talos-v1-13-1-4711 -t acme",
		Flags: []cli.Flag{tenantFlag()},
		BashComplete: func(c *cli.Context) {
			fmt.Fprintln(c.App.Writer, "apply/\nupgrade/")
		},
		Action: func(c *cli.Context) error {
			k, name, err := typedName(c, domain.ApplyKind.Plural, domain.UpgradeKind.Plural)
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
			var st domain.Status
			if err := cl.call(c.Context, request{method: http.MethodPost, path: k.itemPath(tenant, name) + "/cancel"}, &st); err != nil {
				return err
			}
			msg := st.Message
			if msg == "" {
				msg = "cancel requested"
			}
			fmt.Fprintf(r.env.Stdout, "%s/%s: %s\n", k.Singular, name, msg)
			return nil
		},
	}
}

// typedName reads the KIND/NAME (or KIND NAME) argument of a command that
// acts on one of a few kinds, given by plural.
func typedName(c *cli.Context, plurals ...string) (kind, string, error) {
	args := c.Args().Slice()
	var kindArg, name string
	switch {
	case len(args) == 1 && strings.Contains(args[0], "/"):
		kindArg, name, _ = strings.Cut(args[0], "/")
	case len(args) == 2:
		kindArg, name = args[0], args[1]
	}
	var names []string
	for _, p := range plurals {
		k, err := resolveKind(p)
		if err != nil {
			return kind{}, "", err
		}
		names = append(names, k.Singular+"/NAME")
	}
	if kindArg == "" || name == "" {
		return kind{}, "", fmt.Errorf("give %s", strings.Join(names, " or "))
	}
	k, err := resolveKind(kindArg)
	if err != nil {
		return kind{}, "", err
	}
	for _, p := range plurals {
		if k.Plural == p {
			return k, name, nil
		}
	}
	return kind{}, "", fmt.Errorf("%s: give %s", c.Command.Name, strings.Join(names, " or "))
}

// requireTenant is --tenant or the context's, or an error saying how to give one.
func requireTenant(s *session, c *cli.Context) (string, error) {
	if t := s.tenant(c); t != "" {
		return t, nil
	}
	return "", errors.New("give the tenant with --tenant/-t (or set one on the context)")
}
