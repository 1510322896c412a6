package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

// loginResponse is the answer of POST /api/v1/auth/login.
type loginResponse struct {
	Token     string `json:"token"`
	ExpiresAt string `json:"expiresAt"`
	User      string `json:"user"`
	Role      string `json:"role"`
}

// whoamiResponse is the answer of GET /api/v1/auth/whoami.
type whoamiResponse struct {
	User       string `json:"user"`
	Role       string `json:"role"`
	AuthMethod string `json:"authMethod"`
	// Groups are the identity provider's groups of a single sign-on session.
	Groups []string `json:"groups,omitempty"`
}

func (r *rezusctl) loginCommand() *cli.Command {
	return &cli.Command{
		Name:  "login",
		Usage: "log in with a user name and password and keep the session token in the context",
		Description: "The token goes into the context named by --context, else the current context; with --server and no\n" +
			"context for that server, a context named after the server's host is made and becomes current.\n\n" +
			"  rezusctl login --server https://rezus.example:8443 --certificate-authority ca.pem\n" +
			"  echo \"$PASSWORD\" | rezusctl login --username alice --password-stdin",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "username", Aliases: []string{"u"}, Value: "admin", Usage: "user name"},
			&cli.BoolFlag{Name: "password-stdin", Usage: "read the password from the first line of stdin"},
			&cli.BoolFlag{Name: "sso", Usage: "sign in at the server's identity provider in a browser (single sign-on; the browser comes back to a loopback address)"},
			&cli.BoolFlag{Name: "no-browser", Usage: "with --sso: print the sign-in URL instead of opening a browser"},
			&cli.DurationFlag{Name: "sso-timeout", Value: 5 * time.Minute, Usage: "with --sso: how long to wait for the sign-in in the browser"},
		},
		Action: r.login,
	}
}

func (r *rezusctl) login(c *cli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", c.Args().Slice())
	}
	s, err := r.sessionFor(c, true)
	if err != nil {
		return err
	}
	entry, err := s.loginContext(c)
	if err != nil {
		return err
	}
	s.opts.Token = "" // a stale token must not ride along
	var resp loginResponse
	if c.Bool("sso") {
		if resp, err = r.loginSSO(c, s); err != nil {
			return err
		}
	} else {
		password, err := r.readPassword(c)
		if err != nil {
			return err
		}
		cl, err := s.client()
		if err != nil {
			return err
		}
		body, _ := json.Marshal(map[string]string{"username": c.String("username"), "password": password})
		if err := cl.call(c.Context, request{method: http.MethodPost, path: "/api/v1/auth/login", body: body}, &resp); err != nil {
			var se *statusError
			if errors.As(err, &se) && (se.Code == http.StatusUnauthorized || se.Code == http.StatusForbidden) {
				return fmt.Errorf("login failed: %s", se.Status.Message)
			}
			return err
		}
	}
	if resp.Token == "" {
		return errors.New("the server answered the login without a token")
	}
	entry.Server = s.opts.Server
	entry.Token = resp.Token
	if v := c.String(flagCA); v != "" {
		entry.CertificateAuthority = absPath(v)
	}
	if c.Bool(flagInsecure) {
		entry.InsecureSkipTLSVerify = true
	}
	if s.cfg.CurrentContext == "" || c.String(flagContext) == "" {
		s.cfg.CurrentContext = entry.Name
	}
	if err := s.cfg.save(s.cfgPath); err != nil {
		return err
	}
	msg := fmt.Sprintf("logged in to %s as %s", s.opts.Server, resp.User)
	if resp.Role != "" {
		msg += " (" + resp.Role + ")"
	}
	if resp.ExpiresAt != "" {
		msg += "; the session expires at " + resp.ExpiresAt
	}
	fmt.Fprintf(r.env.Stdout, "%s; context %q\n", msg, entry.Name)
	return nil
}

// loginContext picks the context login writes to: --context, else the
// current context when it has the same server (or none yet), else one named
// after the server's host.
func (s *session) loginContext(c *cli.Context) (*contextEntry, error) {
	if s.opts.Server == "" {
		return nil, errors.New("give the server to log in to with --server URL")
	}
	if name := c.String(flagContext); name != "" {
		return s.cfg.ensureContext(name), nil
	}
	if s.ctx != nil && (c.String(flagServer) == "" || s.ctx.Server == "" || sameServer(s.ctx.Server, s.opts.Server)) {
		return s.ctx, nil
	}
	for _, e := range s.cfg.Contexts {
		if sameServer(e.Server, s.opts.Server) {
			return e, nil
		}
	}
	name := s.opts.Server
	if u, err := url.Parse(s.opts.Server); err == nil && u.Host != "" {
		name = u.Host
	}
	return s.cfg.ensureContext(name), nil
}

func sameServer(a, b string) bool { return strings.TrimRight(a, "/") == strings.TrimRight(b, "/") }

// readPassword reads the password from stdin (--password-stdin) or prompts
// for it without echo on a terminal.
func (r *rezusctl) readPassword(c *cli.Context) (string, error) {
	if c.Bool("password-stdin") {
		line, err := bufio.NewReader(r.env.Stdin).ReadString('\n')
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if err != nil {
				return "", fmt.Errorf("reading the password from stdin: %w", err)
			}
			return "", errors.New("the password on stdin is empty")
		}
		return line, nil
	}
	if !r.env.StdinIsTerminal() || r.env.ReadPassword == nil {
		return "", errors.New("stdin is not a terminal to prompt for a password on: use --password-stdin")
	}
	fmt.Fprintf(r.env.Stderr, "Password for %s: ", c.String("username"))
	b, err := r.env.ReadPassword()
	fmt.Fprintln(r.env.Stderr)
	if err != nil {
		return "", fmt.Errorf("reading the password: %w", err)
	}
	if len(b) == 0 {
		return "", errors.New("the password is empty")
	}
	return string(b), nil
}

func (r *rezusctl) logoutCommand() *cli.Command {
	return &cli.Command{
		Name:  "logout",
		Usage: "end the session on the server and forget the context's token",
		Action: func(c *cli.Context) error {
			s, err := r.session(c)
			if err != nil {
				return err
			}
			if s.ctx == nil || s.ctx.Token == "" {
				return errors.New("not logged in: the context has no token")
			}
			cl, err := s.client()
			if err != nil {
				return err
			}
			err = cl.call(c.Context, request{method: http.MethodPost, path: "/api/v1/auth/logout"}, nil)
			// An expired or revoked session is as good as logged out; anything
			// else (the server unreachable) keeps the token so logout can be retried.
			if err != nil && httpCode(err) != http.StatusUnauthorized {
				return err
			}
			s.ctx.Token = ""
			if err := s.cfg.save(s.cfgPath); err != nil {
				return err
			}
			fmt.Fprintf(r.env.Stdout, "logged out of %s (context %q)\n", s.ctx.Server, s.ctx.Name)
			return nil
		},
	}
}

func (r *rezusctl) whoamiCommand() *cli.Command {
	return &cli.Command{
		Name:  "whoami",
		Usage: "show who the server takes you for",
		Flags: []cli.Flag{&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "json or yaml instead of text"}},
		Action: func(c *cli.Context) error {
			_, cl, err := r.connect(c)
			if err != nil {
				return err
			}
			var raw []byte
			if err := cl.call(c.Context, request{method: http.MethodGet, path: "/api/v1/auth/whoami"}, &raw); err != nil {
				return err
			}
			switch o := c.String("output"); o {
			case outJSON, outYAML:
				return (&printer{w: r.env.Stdout, format: o}).printDoc(raw)
			case "":
			default:
				return fmt.Errorf("unknown output format %q: use json or yaml", o)
			}
			var w whoamiResponse
			if err := json.Unmarshal(raw, &w); err != nil {
				return fmt.Errorf("the server's whoami answer is not the JSON expected: %w", err)
			}
			fmt.Fprintf(r.env.Stdout, "user:        %s\nrole:        %s\nauth method: %s\n", w.User, orNone(w.Role), orNone(w.AuthMethod))
			if len(w.Groups) > 0 {
				fmt.Fprintf(r.env.Stdout, "groups:      %s\n", strings.Join(w.Groups, ", "))
			}
			return nil
		},
	}
}
