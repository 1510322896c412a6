package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/domain"
)

func (r *rezusctl) createNodeGroupCommand() *cli.Command {
	return &cli.Command{
		Name:    "nodegroup",
		Aliases: []string{"ng"},
		Usage:   "create a node group from flags",
		Description: "The machines of a node group install from the Image Factory's installer of its schematic:\n" +
			"--extension names system extensions (as the factory does), --kernel-arg extra kernel arguments;\n" +
			"neither: the tenant's schematic. Other settings go in a file (rezusctl create -f).\n\n" +
			"  rezusctl create nodegroup storage -t acme --role worker --count 3 --provider emulated \\\n" +
			"      --extension siderolabs/iscsi-tools --extension siderolabs/util-linux-tools",
		ArgsUsage: "NAME",
		Flags: []cli.Flag{
			tenantFlag(),
			&cli.StringFlag{Name: "role", Value: domain.RoleWorker, Usage: "worker or controlplane"},
			&cli.IntFlag{Name: "count", Value: 1, Usage: "how many machines"},
			&cli.StringFlag{Name: "provider", Usage: "the Provider that builds the machines (required)"},
			&cli.StringFlag{Name: "talos-version", Usage: "the group's Talos version; empty: the tenant's"},
			&cli.StringSliceFlag{Name: "extension", Usage: "a system extension of the group's schematic, e.g. siderolabs/iscsi-tools (repeat for more)"},
			&cli.StringSliceFlag{Name: "kernel-arg", Usage: "an extra kernel argument of the group's schematic, e.g. console=ttyS0 (repeat for more)"},
			&cli.BoolFlag{Name: "secure-boot", Usage: "install the secure-boot variant of the factory's installer"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print the node group instead of creating it"},
		},
		Action: r.createNodeGroup,
	}
}

// printYAML writes a JSON object as YAML on stdout (a --dry-run).
func (r *rezusctl) printYAML(body []byte) error {
	y, err := toYAML(body)
	if err != nil {
		return err
	}
	_, err = r.env.Stdout.Write(y)
	return err
}

func (r *rezusctl) createNodeGroup(c *cli.Context) error {
	if c.NArg() != 1 {
		return errors.New("give the node group's name: rezusctl create nodegroup NAME -t TENANT --provider PROVIDER")
	}
	if c.String("provider") == "" {
		return errors.New("give the Provider that builds the machines: --provider NAME")
	}
	spec := domain.NodeGroupSpec{Role: c.String("role"), Count: c.Int("count"), Provider: c.String("provider"), TalosVersion: c.String("talos-version")}
	if exts, args := c.StringSlice("extension"), c.StringSlice("kernel-arg"); len(exts) > 0 || len(args) > 0 || c.Bool("secure-boot") {
		spec.Schematic = &domain.Schematic{Extensions: exts, ExtraKernelArgs: args, SecureBoot: c.Bool("secure-boot")}
	}
	obj := map[string]any{"apiVersion": domain.APIVersion, "kind": domain.NodeGroupKind.Kind,
		"metadata": map[string]any{"name": c.Args().First()}, "spec": spec}
	body, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	if c.Bool("dry-run") {
		return r.printYAML(body)
	}
	s, cl, err := r.connect(c)
	if err != nil {
		return err
	}
	k, _ := resolveKind(domain.NodeGroupKind.Kind)
	tenant := s.tenant(c)
	if tenant == "" {
		return k.errTenantRequired(false)
	}
	if err := cl.call(c.Context, request{method: http.MethodPost, path: k.collectionPath(tenant), body: body}, nil); err != nil {
		return err
	}
	fmt.Fprintf(r.env.Stdout, "%s/%s created\n", k.Singular, c.Args().First())
	return nil
}

// autoscalingCell is a MIN or MAX cell of get nodegroups: a bound of
// spec.autoscaling, or "-" for a group that does not autoscale (its size is
// spec.count alone), as kubectl shows an absent value.
func autoscalingCell(path string) func(*domain.Object, time.Time) string {
	return func(o *domain.Object, _ time.Time) string {
		if v := lookup(o, path); v != "" {
			return v
		}
		return "-"
	}
}
