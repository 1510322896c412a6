package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/domain"
)

// rotateSecretFlags are rotate's secret flags, each named as the secret in
// spec.rotate, in the order they are sent. The refused ones are flags too:
// the server's answer says why each cannot be rotated.
var rotateSecretFlags = []struct{ secret, usage string }{
	{domain.SecretKubernetesCA, "the Kubernetes CA, and every kubelet, component and admin certificate issued from it (the old break-glass kubeconfig stops working)"},
	{domain.SecretTalosCA, "the Talos API CA (old talosconfigs stop working)"},
	{domain.SecretAggregatorCA, "the aggregator (front-proxy) CA"},
	{domain.SecretBootstrapToken, "the kubelet bootstrap token and the trustd join token"},
	{domain.SecretServiceAccountKey, "the service-account signing key (refused: Talos cannot keep the old key verifying)"},
	{domain.SecretEncryptionKey, "the secretbox key that encrypts Secrets in etcd (refused: Talos cannot keep the old key reading)"},
	{domain.SecretEtcdCA, "the etcd CA (refused: siderolabs/talos#8808)"},
	{domain.SecretAll, "every secret that can be rotated: " + strings.Join(domain.RotatableSecrets, ", ")},
}

// rotateCommand rotates secrets of a tenant: an Upgrade with spec.rotate,
// which the upgrade saga carries out machine by machine, stage by stage,
// and which --wait follows as `upgrade --wait` does.
func (r *rezusctl) rotateCommand() *cli.Command {
	flags := make([]cli.Flag, 0, len(rotateSecretFlags)+6)
	for _, f := range rotateSecretFlags {
		flags = append(flags, &cli.BoolFlag{Name: f.secret, Usage: "rotate " + f.usage})
	}
	flags = append(flags,
		&cli.StringFlag{Name: "name", Usage: "`NAME` of the rotation's upgrade (default: generated)"},
		&cli.BoolFlag{Name: "no-drain", Usage: "do not cordon and drain each machine's Node before its kubelet restarts"},
		&cli.BoolFlag{Name: "now", Usage: "start machines outside the tenant's maintenance windows (spec.maintenance); recorded with the run in the audit log"},
		&cli.BoolFlag{Name: "wait", Aliases: []string{"w"}, Usage: "follow the rotation until it ends"},
		&cli.DurationFlag{Name: "timeout", Usage: "give up waiting after this long (0: no limit)"},
	)
	return &cli.Command{
		Name:      "rotate",
		Usage:     "rotate a tenant's CAs and tokens, one machine at a time, without downtime",
		ArgsUsage: "TENANT",
		Description: "Creates an upgrade that rotates the secrets named by the flags (spec.rotate): every machine\n" +
			"takes configs with the new ones, control planes first, one machine at a time, applied in place.\n" +
			"A CA (--kubernetes-ca, --talos-ca) goes through three stages, as talosctl rotate-ca does: accept\n" +
			"(the new CA is trusted beside the old), swap (the new CA issues, the old is still trusted) and\n" +
			"drop (the old is no longer trusted); the others are swapped in one stage. The etcd CA, the\n" +
			"service-account key and the encryption key are refused, with the reason. --wait prints each\n" +
			"machine's progress in each stage as `rezusctl upgrade --wait` does; the exit code is 0 only\n" +
			"when the rotation succeeds. `rezusctl upgrade TENANT --follow NAME` follows one later.\n\n" +
			"  rezusctl rotate acme --kubernetes-ca --wait\n" +
			"  rezusctl rotate acme --talos-ca --bootstrap-token --now\n" +
			"  rezusctl rotate acme --all --wait",
		Flags:  flags,
		Action: r.rotate,
	}
}

func (r *rezusctl) rotate(c *cli.Context) error {
	if c.NArg() != 1 {
		return errors.New("give the tenant: rezusctl rotate TENANT --kubernetes-ca (or --talos-ca, --aggregator-ca, --bootstrap-token, --all)")
	}
	tenant := c.Args().First()
	spec := rotateSpecOf(c)
	if len(spec.Rotate) == 0 {
		return errors.New("give the secrets to rotate: --kubernetes-ca, --talos-ca, --aggregator-ca, --bootstrap-token or --all")
	}
	_, cl, err := r.connect(c)
	if err != nil {
		return err
	}
	k, err := resolveKind("upgrades")
	if err != nil {
		return err
	}
	ctx := c.Context
	if d := c.Duration("timeout"); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	name := c.String("name")
	if name == "" {
		name = generatedName("rotate-", strings.Join(spec.Rotate, "-"))
	}
	u, err := postUpgrade(ctx, cl, k, tenant, name, spec)
	if err != nil {
		return err
	}
	fmt.Fprintf(r.env.Stdout, "upgrade/%s created: rotating %s of tenant %q\n", u.Metadata.Name, strings.Join(spec.Rotate, ", "), tenant)
	if !c.Bool("wait") {
		return nil
	}
	err = r.followUpgrade(ctx, cl, k, tenant, u)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && c.Context.Err() == nil {
		return fmt.Errorf("timed out after %s; the rotation goes on (rezusctl upgrade %s --follow %s)", c.Duration("timeout"), tenant, u.Metadata.Name)
	}
	return err
}

// rotateSpecOf is the Upgrade the flags ask for: the secrets in the order of
// rotateSecretFlags (the server orders and checks them), one at a time.
func rotateSpecOf(c *cli.Context) domain.UpgradeSpec {
	spec := domain.UpgradeSpec{MaxParallelism: 1, NoDrain: c.Bool("no-drain"), Now: c.Bool("now")}
	for _, f := range rotateSecretFlags {
		if c.Bool(f.secret) {
			spec.Rotate = append(spec.Rotate, f.secret)
		}
	}
	return spec
}
