package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/urfave/cli/v2"
)

// credentialCommand is kubeconfig or talosconfig: download a tenant's client
// config from GET /api/v1/tenants/{tenant}/<name> and write it 0600.
func (r *rezusctl) credentialCommand(name, what string) *cli.Command {
	return &cli.Command{
		Name:  name,
		Usage: "write " + what + " to a file (mode 0600)",
		Description: fmt.Sprintf("The file is <tenant>.%s in the current directory unless --output names one (- for stdout).\n"+
			"A kubeconfig holds no key: kubectl runs `rezusctl credential kubernetes` for a short-lived certificate of\n"+
			"your role on the tenant; a talosconfig is short-lived too (download it again when it ends).\n\n"+
			"  rezusctl %s -t acme\n  rezusctl %s -t acme -o ~/.%s/acme", name, name, name, map[string]string{"kubeconfig": "kube", "talosconfig": "talos"}[name]),
		Flags: append([]cli.Flag{
			tenantFlag(),
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "`FILE` to write, or - for stdout"},
		}, credentialFlags(name)...),
		Action: func(c *cli.Context) error {
			s, cl, err := r.connect(c)
			if err != nil {
				return err
			}
			tenant := s.tenant(c)
			if tenant == "" {
				return errors.New("give the tenant with --tenant/-t (or set one on the context)")
			}
			path := "/api/v1/tenants/" + tenant + "/" + name
			breakGlass := name == "kubeconfig" && c.Bool("admin")
			if breakGlass {
				path += "/admin"
			}
			var body []byte
			err = cl.call(c.Context, request{method: http.MethodGet, path: path,
				header: http.Header{"Accept": {"application/yaml, application/json;q=0.9, */*;q=0.8"}}}, &body)
			if err != nil {
				return err
			}
			body = credentialBody(body, name)
			if name == "kubeconfig" && !breakGlass {
				if body, err = r.execKubeconfig(s, body); err != nil {
					return err
				}
			}
			out := c.String("output")
			if out == "-" {
				_, err := r.env.Stdout.Write(body)
				return err
			}
			if out == "" {
				out = tenant + "." + name
			}
			if err := writeFileAtomic(out, body); err != nil {
				return err
			}
			fmt.Fprintf(r.env.Stdout, "wrote the %s of tenant %q to %s\n", name, tenant, out)
			return nil
		},
	}
}

// credentialFlags are the flags of one credential command: kubeconfig's
// --admin asks for the break-glass one.
func credentialFlags(name string) []cli.Flag {
	if name != "kubeconfig" {
		return nil
	}
	return []cli.Flag{&cli.BoolFlag{Name: "admin", Usage: "the break-glass kubeconfig: system:masters, valid a year, for global admins; audited"}}
}

// credentialBody takes the config out of a JSON answer such as
// {"kubeconfig": "..."}; any other answer is the file itself.
func credentialBody(b []byte, name string) []byte {
	t := bytes.TrimSpace(b)
	if len(t) == 0 || t[0] != '{' {
		return b
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(t, &m) != nil {
		return b
	}
	for _, k := range []string{name, "config", "data"} {
		var s string
		if json.Unmarshal(m[k], &s) == nil && s != "" {
			return []byte(s)
		}
	}
	return b
}
