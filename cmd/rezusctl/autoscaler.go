package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"
)

// autoscalerCommand groups the cluster-autoscaler's commands.
func (r *rezusctl) autoscalerCommand() *cli.Command {
	return &cli.Command{
		Name:  "autoscaler",
		Usage: "connect a tenant's cluster-autoscaler (--cloud-provider=externalgrpc) to RezusCloud",
		Subcommands: []*cli.Command{
			r.autoscalerConfigCommand(),
		},
	}
}

// autoscalerCredentials is the answer of POST .../autoscaler/certificates.
type autoscalerCredentials struct {
	Serial      string `json:"serial"`
	NotAfter    string `json:"notAfter"`
	Tenant      string `json:"tenant"`
	Endpoint    string `json:"endpoint"`
	Certificate string `json:"certificate"`
	Key         string `json:"key"`
	CA          string `json:"ca"`
}

// autoscalerConfigCommand issues a client certificate for the tenant's
// autoscaler and writes what it reads: DIR/cloud-config and the files it
// names.
func (r *rezusctl) autoscalerConfigCommand() *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "issue the autoscaler's certificate and write DIR/cloud-config, tls.crt, tls.key and ca.crt",
		Description: "The certificate sees and scales only the tenant's node groups that declare spec.autoscaling.\n" +
			"Each call issues a new one (the earlier ones stay valid until revoked or expired). The cloud-config\n" +
			"names the files as the autoscaler's pod mounts them (--mount-dir, default /etc/rezuscloud-autoscaler);\n" +
			"deploy/autoscaler/ shows a Secret made from DIR.\n\n" +
			"  rezusctl autoscaler config -t acme -o ./acme-autoscaler\n" +
			"  kubectl -n kube-system create secret generic rezuscloud-autoscaler --from-file=./acme-autoscaler",
		Flags: []cli.Flag{
			tenantFlag(),
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Required: true, Usage: "`DIR` to write the files to (created 0700)"},
			&cli.StringFlag{Name: "validity", Usage: "how long the certificate is valid, e.g. 720h (default 30 days, at most a year)"},
			&cli.StringFlag{Name: "mount-dir", Value: "/etc/rezuscloud-autoscaler", Usage: "where the autoscaler reads the files; \"\" names them in DIR"},
		},
		Action: func(c *cli.Context) error {
			s, cl, err := r.connect(c)
			if err != nil {
				return err
			}
			tenant := s.tenant(c)
			if tenant == "" {
				return errors.New("give the tenant with --tenant/-t (or set one on the context)")
			}
			body, err := json.Marshal(map[string]string{"validity": c.String("validity")})
			if err != nil {
				return err
			}
			var creds autoscalerCredentials
			if err := cl.call(c.Context, request{method: http.MethodPost, path: "/api/v1/tenants/" + tenant + "/autoscaler/certificates", body: body}, &creds); err != nil {
				return err
			}
			dir := c.String("output")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			abs, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			mount := c.String("mount-dir")
			if mount == "" {
				mount = abs
			}
			cloudConfig := fmt.Sprintf("address: %q\ncert: %q\nkey: %q\ncacert: %q\ngrpc_timeout: 10s\n",
				creds.Endpoint, filepath.Join(mount, "tls.crt"), filepath.Join(mount, "tls.key"), filepath.Join(mount, "ca.crt"))
			for name, content := range map[string]string{"cloud-config": cloudConfig, "tls.crt": creds.Certificate, "tls.key": creds.Key, "ca.crt": creds.CA} {
				if err := writeFileAtomic(filepath.Join(dir, name), []byte(content)); err != nil {
					return err
				}
			}
			fmt.Fprintf(r.env.Stdout, "wrote the autoscaler config of tenant %q to %s (certificate %s, valid until %s; endpoint %s)\n",
				tenant, dir, creds.Serial, creds.NotAfter, creds.Endpoint)
			return nil
		},
	}
}
