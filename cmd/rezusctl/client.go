package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// client talks to one RezusCloud server's REST API.
type client struct {
	base  *url.URL
	token string
	http  *http.Client
}

// clientOptions is what a client is built from: the context's settings with
// the command-line flags applied over them.
type clientOptions struct {
	// Server is the base URL (scheme, host and port).
	Server string
	// Token is sent as "Authorization: Bearer <token>" when set.
	Token string
	// CAFile is a PEM file of the CAs to trust instead of the system's.
	CAFile string
	// Insecure skips certificate verification.
	Insecure bool
}

func newClient(o clientOptions) (*client, error) {
	if o.Server == "" {
		return nil, errors.New("no server: give --server, or pick a context with a server (rezusctl config set-context NAME --server URL, then use-context NAME)")
	}
	u, err := url.Parse(strings.TrimRight(o.Server, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server %q must be an http:// or https:// URL with a host", o.Server)
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: o.Insecure} //nolint:gosec // the user asked for it
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading certificate authority: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("certificate authority %s holds no PEM certificate", o.CAFile)
		}
		tlsCfg.RootCAs = pool
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tlsCfg,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &client{base: u, token: o.Token, http: &http.Client{Transport: tr}}, nil
}

// request is one API call.
type request struct {
	method string
	path   string
	query  url.Values
	body   []byte
	// contentType defaults to application/json when there is a body.
	contentType string
	header      http.Header
}

// do sends a request and returns the response for a 2xx answer. Any other
// answer becomes a *statusError and a transport failure a *networkError.
func (c *client) do(ctx context.Context, r request) (*http.Response, error) {
	u := *c.base
	u.Path = strings.TrimRight(c.base.Path, "/") + r.path
	if len(r.query) > 0 {
		u.RawQuery = r.query.Encode()
	}
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), body)
	if err != nil {
		return nil, err
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	if r.body != nil {
		ct := r.contentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "application/json")
	}
	req.Header.Set("User-Agent", "rezusctl/"+version)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &networkError{server: c.base.String(), err: err}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, newStatusError(resp.StatusCode, b)
	}
	return resp, nil
}

// call sends a request and reads a 2xx answer's body into out: a *[]byte
// takes it raw, anything else is JSON-decoded; nil discards it.
func (c *client) call(ctx context.Context, r request, out any) error {
	resp, err := c.do(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return &networkError{server: c.base.String(), err: err}
	}
	switch o := out.(type) {
	case nil:
		return nil
	case *[]byte:
		*o = b
		return nil
	default:
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("the server's answer to %s %s is not the JSON expected: %w", r.method, r.path, err)
		}
		return nil
	}
}

// getObject reads one object.
func (c *client) getObject(ctx context.Context, k kind, tenant, name string) (*domain.Object, error) {
	obj := &domain.Object{}
	if err := c.call(ctx, request{method: http.MethodGet, path: k.itemPath(tenant, name)}, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// statusError is a non-2xx answer. Status is the server's Kubernetes Status,
// or one made up from the HTTP code when the body was something else.
type statusError struct {
	Code   int
	Status domain.Status
}

func newStatusError(code int, body []byte) *statusError {
	var st domain.Status
	if err := json.Unmarshal(body, &st); err != nil || st.Kind != "Status" {
		msg := strings.TrimSpace(string(body))
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		if msg == "" {
			msg = http.StatusText(code)
		}
		st = domain.Status{Kind: "Status", Status: "Failure", Code: code, Reason: reasonForCode(code),
			Message: fmt.Sprintf("the server answered %d %s: %s", code, http.StatusText(code), msg)}
	}
	if st.Code == 0 {
		st.Code = code
	}
	return &statusError{Code: code, Status: st}
}

func (e *statusError) Error() string { return e.Status.Message }

// reasonForCode guesses a reason for answers that carried no Status (a proxy's 502, ...).
func reasonForCode(code int) domain.Reason {
	for _, r := range []domain.Reason{domain.ReasonNotFound, domain.ReasonConflict, domain.ReasonInvalid, domain.ReasonBadRequest,
		domain.ReasonUnauthorized, domain.ReasonForbidden, domain.ReasonGone, domain.ReasonRequestEntityTooLarge,
		domain.ReasonTooManyRequests, domain.ReasonMethodNotAllowed, domain.ReasonUnsupportedMediaType, domain.ReasonServiceUnavailable} {
		if r.Code() == code {
			return r
		}
	}
	return domain.ReasonInternalError
}

// httpCode returns the HTTP code of a statusError, or 0.
func httpCode(err error) int {
	var se *statusError
	if errors.As(err, &se) {
		return se.Code
	}
	return 0
}

func isNotFound(err error) bool { return httpCode(err) == http.StatusNotFound }
func isConflict(err error) bool { return httpCode(err) == http.StatusConflict }

// networkError is a failure to talk to the server at all.
type networkError struct {
	server string
	err    error
}

func (e *networkError) Unwrap() error { return e.err }

func (e *networkError) Error() string {
	return fmt.Sprintf("cannot reach the server at %s: %s", e.server, describeNetErr(e.err))
}

// describeNetErr turns a transport error into the one phrase a person needs,
// with a hint where there is an obvious next step.
func describeNetErr(err error) string {
	var (
		unknownCA x509.UnknownAuthorityError
		verify    *tls.CertificateVerificationError
		hostname  x509.HostnameError
		dns       *net.DNSError
		recordHdr tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &unknownCA), errors.As(err, &verify) && errors.As(verify.Err, &unknownCA):
		return "the server's certificate is signed by an unknown authority (trust it with --certificate-authority FILE, or --insecure-skip-tls-verify for a test server)"
	case errors.As(err, &hostname):
		return hostname.Error()
	case errors.As(err, &verify):
		return "the server's certificate is not valid: " + verify.Err.Error()
	case errors.As(err, &recordHdr), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return "the server does not speak TLS; use an http:// URL"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.As(err, &dns):
		return "cannot resolve " + dns.Name
	case errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err):
		return "timed out"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the connection was closed"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}
