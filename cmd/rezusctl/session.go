package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// session is what a command runs with: the config file, the context picked by
// --context or current-context, and the connection settings after the global
// flags are applied over that context.
type session struct {
	cfgPath string
	cfg     *configFile
	// ctx is the context in use; nil when the config has none (flags only).
	ctx  *contextEntry
	opts clientOptions
}

// session loads the config and resolves the context and flags of a command.
func (r *rezusctl) session(c *cli.Context) (*session, error) { return r.sessionFor(c, false) }

// sessionFor is session; newContext lets --context name a context that does
// not exist yet (login creates it).
func (r *rezusctl) sessionFor(c *cli.Context, newContext bool) (*session, error) {
	path, err := configPath(r.env.Getenv)
	if err != nil {
		return nil, err
	}
	cfg, err := loadConfig(path)
	if err != nil {
		return nil, err
	}
	s := &session{cfgPath: path, cfg: cfg}
	name := c.String(flagContext)
	if name != "" {
		if s.ctx = cfg.context(name); s.ctx == nil && !newContext {
			return nil, fmt.Errorf("context %q is not in %s (see rezusctl config get-contexts)", name, path)
		}
	} else if cfg.CurrentContext != "" {
		s.ctx = cfg.context(cfg.CurrentContext)
		if s.ctx == nil {
			return nil, fmt.Errorf("current context %q is not in %s (pick one with rezusctl config use-context)", cfg.CurrentContext, path)
		}
	}
	if s.ctx != nil {
		s.opts = clientOptions{Server: s.ctx.Server, Token: s.ctx.Token, CAFile: s.ctx.CertificateAuthority, Insecure: s.ctx.InsecureSkipTLSVerify}
	}
	if v := c.String(flagServer); v != "" {
		s.opts.Server = v
	}
	if v := c.String(flagToken); v != "" {
		s.opts.Token = v
	}
	if v := c.String(flagCA); v != "" {
		s.opts.CAFile = v
	}
	if c.Bool(flagInsecure) {
		s.opts.Insecure = true
	}
	return s, nil
}

// client builds the API client of the session.
func (s *session) client() (*client, error) { return newClient(s.opts) }

// tenant is --tenant when given, else the context's default tenant.
func (s *session) tenant(c *cli.Context) string {
	if t := c.String("tenant"); t != "" {
		return t
	}
	if s.ctx != nil {
		return s.ctx.Tenant
	}
	return ""
}

// connect is session + client, the start of most commands.
func (r *rezusctl) connect(c *cli.Context) (*session, *client, error) {
	s, err := r.session(c)
	if err != nil {
		return nil, nil, err
	}
	cl, err := s.client()
	if err != nil {
		return nil, nil, err
	}
	return s, cl, nil
}

// tenantFlag is the --tenant/-t flag of commands that take one.
func tenantFlag() cli.Flag {
	return &cli.StringFlag{Name: "tenant", Aliases: []string{"t"}, Usage: "tenant of tenant-scoped kinds (default: the context's)"}
}
