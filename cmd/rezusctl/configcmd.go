package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/urfave/cli/v2"
)

func (r *rezusctl) configCommand() *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "manage contexts in $REZUSCONFIG or ~/.config/rezus/config; render machine configs",
		Subcommands: []*cli.Command{
			r.configRenderCommand(),
			{
				Name:  "get-contexts",
				Usage: "list the contexts; * marks the current one",
				Action: func(c *cli.Context) error {
					_, cfg, err := r.loadConfig()
					if err != nil {
						return err
					}
					rows := [][]string{{"CURRENT", "NAME", "SERVER", "TENANT", "AUTH"}}
					for _, e := range cfg.Contexts {
						cur := ""
						if e.Name == cfg.CurrentContext {
							cur = "*"
						}
						auth := "<none>"
						if e.Token != "" {
							auth = "token"
						}
						rows = append(rows, []string{cur, e.Name, orNone(e.Server), orNone(e.Tenant), auth})
					}
					t := table{w: r.env.Stdout}
					return t.write(rows)
				},
			},
			{
				Name:      "current-context",
				Usage:     "print the current context's name",
				ArgsUsage: " ",
				Action: func(c *cli.Context) error {
					_, cfg, err := r.loadConfig()
					if err != nil {
						return err
					}
					if cfg.CurrentContext == "" {
						return errors.New("no current context (set one with rezusctl config use-context NAME)")
					}
					fmt.Fprintln(r.env.Stdout, cfg.CurrentContext)
					return nil
				},
			},
			{
				Name:         "use-context",
				Usage:        "make a context the current one",
				ArgsUsage:    "NAME",
				BashComplete: r.completeContexts,
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return errors.New("give the context's NAME")
					}
					path, cfg, err := r.loadConfig()
					if err != nil {
						return err
					}
					name := c.Args().First()
					if cfg.context(name) == nil {
						return fmt.Errorf("context %q is not in %s (see rezusctl config get-contexts)", name, path)
					}
					cfg.CurrentContext = name
					if err := cfg.save(path); err != nil {
						return err
					}
					fmt.Fprintf(r.env.Stdout, "switched to context %q\n", name)
					return nil
				},
			},
			{
				Name:      "set-context",
				Usage:     "create a context or change some of its settings",
				ArgsUsage: "NAME",
				Description: "Only the settings given change.\n\n" +
					"  rezusctl config set-context lab --server https://10.0.0.5:8443 --certificate-authority ca.pem --tenant acme\n" +
					"  rezusctl config set-context lab --token \"$TOKEN\" --current",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "server", Usage: "server URL"},
					&cli.StringFlag{Name: "token", Usage: "bearer token (an API token, or a session from login)"},
					&cli.StringFlag{Name: "tenant", Usage: "default tenant for tenant-scoped kinds"},
					&cli.StringFlag{Name: "certificate-authority", Usage: "PEM `FILE` of CAs to trust for the server"},
					&cli.BoolFlag{Name: "insecure-skip-tls-verify", Usage: "do not verify the server's certificate"},
					&cli.BoolFlag{Name: "current", Usage: "also make it the current context"},
				},
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return errors.New("give the context's NAME")
					}
					path, cfg, err := r.loadConfig()
					if err != nil {
						return err
					}
					name := c.Args().First()
					e := cfg.ensureContext(name)
					if c.IsSet("server") {
						e.Server = c.String("server")
					}
					if c.IsSet("token") {
						e.Token = c.String("token")
					}
					if c.IsSet("tenant") {
						e.Tenant = c.String("tenant")
					}
					if c.IsSet("certificate-authority") {
						e.CertificateAuthority = absPath(c.String("certificate-authority"))
					}
					if c.IsSet("insecure-skip-tls-verify") {
						e.InsecureSkipTLSVerify = c.Bool("insecure-skip-tls-verify")
					}
					if c.Bool("current") || cfg.CurrentContext == "" {
						cfg.CurrentContext = name
					}
					if err := cfg.save(path); err != nil {
						return err
					}
					fmt.Fprintf(r.env.Stdout, "context %q set\n", name)
					return nil
				},
			},
			{
				Name:         "delete-context",
				Usage:        "remove a context",
				ArgsUsage:    "NAME",
				BashComplete: r.completeContexts,
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return errors.New("give the context's NAME")
					}
					path, cfg, err := r.loadConfig()
					if err != nil {
						return err
					}
					if !cfg.deleteContext(c.Args().First()) {
						return fmt.Errorf("context %q is not in %s", c.Args().First(), path)
					}
					if err := cfg.save(path); err != nil {
						return err
					}
					fmt.Fprintf(r.env.Stdout, "context %q deleted\n", c.Args().First())
					return nil
				},
			},
		},
	}
}

func (r *rezusctl) completeContexts(c *cli.Context) {
	_, cfg, err := r.loadConfig()
	if err != nil {
		return
	}
	for _, e := range cfg.Contexts {
		fmt.Fprintln(c.App.Writer, e.Name)
	}
}

// optionalAbsPath is absPath of a flag that may be unset: "" stays "".
func optionalAbsPath(p string) string {
	if p == "" {
		return ""
	}
	return absPath(p)
}

// absPath makes a file path absolute so the context works from any directory.
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// loadConfig reads the config file without resolving a context, for the
// commands that manage contexts (and so must work when the current one is broken).
func (r *rezusctl) loadConfig() (string, *configFile, error) {
	path, err := configPath(r.env.Getenv)
	if err != nil {
		return "", nil, err
	}
	cfg, err := loadConfig(path)
	return path, cfg, err
}
