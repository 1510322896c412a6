package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/oauth2"
)

// loginSSO signs in through the server's identity provider: a loopback
// listener (RFC 8252) receives the browser at the end of the sign-in with
// a one-time code, which only this process can exchange for the session,
// with the PKCE verifier whose challenge started the login.
func (r *rezusctl) loginSSO(c *cli.Context, s *session) (loginResponse, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return loginResponse{}, fmt.Errorf("listening on a loopback port for the browser: %w", err)
	}
	defer ln.Close()
	verifier := oauth2.GenerateVerifier()
	b := make([]byte, 18)
	if _, err := rand.Read(b); err != nil {
		return loginResponse{}, err
	}
	state := base64.RawURLEncoding.EncodeToString(b)
	redirect := "http://" + ln.Addr().String() + "/callback"
	q := url.Values{"cli_redirect": {redirect}, "cli_challenge": {oauth2.S256ChallengeFromVerifier(verifier)}, "cli_state": {state}}
	start := strings.TrimRight(s.opts.Server, "/") + "/api/v1/auth/sso/start?" + q.Encode()

	codes := make(chan string, 1)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/callback" {
			http.NotFound(w, req)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if req.URL.Query().Get("state") != state || req.URL.Query().Get("code") == "" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, "<p>This sign-in was not started by this rezusctl; start it again.</p>")
			return
		}
		select {
		case codes <- req.URL.Query().Get("code"):
			fmt.Fprintf(w, "<p>Signed in to %s. You can close this tab and go back to the terminal.</p>", html.EscapeString(s.opts.Server))
		default:
			fmt.Fprint(w, "<p>This sign-in is done already.</p>")
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()

	fmt.Fprintf(r.env.Stderr, "Sign in at the identity provider in your browser; if it does not open, open this URL:\n  %s\n", start)
	if !c.Bool("no-browser") && r.env.OpenBrowser != nil {
		if err := r.env.OpenBrowser(start); err != nil {
			fmt.Fprintf(r.env.Stderr, "(could not open a browser: %v)\n", err)
		}
	}
	var code string
	select {
	case code = <-codes:
	case <-time.After(c.Duration("sso-timeout")):
		return loginResponse{}, fmt.Errorf("no sign-in came back within %s", c.Duration("sso-timeout"))
	case <-c.Context.Done():
		return loginResponse{}, c.Context.Err()
	}
	cl, err := s.client()
	if err != nil {
		return loginResponse{}, err
	}
	body, _ := json.Marshal(map[string]string{"code": code, "codeVerifier": verifier})
	var resp loginResponse
	if err := cl.call(c.Context, request{method: http.MethodPost, path: "/api/v1/auth/sso/token", body: body}, &resp); err != nil {
		var se *statusError
		if errors.As(err, &se) {
			return loginResponse{}, fmt.Errorf("login failed: %s", se.Status.Message)
		}
		return loginResponse{}, err
	}
	return resp, nil
}

// openBrowser opens url in the desktop's browser, best effort.
func openBrowser(url string) error {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", url)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", url)
	default:
		cmd = exec.Command("xdg-open", url)
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}
