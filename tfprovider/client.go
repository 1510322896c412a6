package tfprovider

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// maxAnswer bounds an answer of the API the provider reads.
const maxAnswer = 16 << 20

// Client calls the RezusCloud API with a bearer token.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
}

// ClientOptions are the provider's connection settings.
type ClientOptions struct {
	Endpoint string
	Token    string
	// CAFile is a PEM file of CAs to trust instead of the system's.
	CAFile   string
	Insecure bool
	Timeout  time.Duration
}

// NewClient checks the endpoint and builds the HTTP client.
func NewClient(o ClientOptions) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(o.Endpoint, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("endpoint %q: want an http(s) URL such as https://rezus.example:8443", o.Endpoint)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if o.CAFile != "" || o.Insecure {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: o.Insecure} //nolint:gosec // asked for, test servers only
		if o.CAFile != "" {
			pem, err := os.ReadFile(o.CAFile)
			if err != nil {
				return nil, fmt.Errorf("reading the CA file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("the CA file %s holds no PEM certificate", o.CAFile)
			}
			cfg.RootCAs = pool
		}
		tr.TLSClientConfig = cfg
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	return &Client{base: u, token: o.Token, http: &http.Client{Transport: tr, Timeout: timeout}}, nil
}

// APIError is an answer other than 2xx: the API's Status.
type APIError struct {
	Code   int
	Status domain.Status
}

func (e *APIError) Error() string {
	if e.Status.Message != "" {
		return e.Status.Message
	}
	return fmt.Sprintf("the API answered %d", e.Code)
}

// IsNotFound says whether err is the API's 404.
func IsNotFound(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Code == http.StatusNotFound
}

// do sends body (JSON, when not nil) and decodes a 2xx answer into out
// (when not nil); it answers the status code.
func (c *Client) do(ctx context.Context, method, path string, body, out any) (int, error) {
	code, b, _, err := c.send(ctx, method, path, body)
	if err != nil || out == nil {
		return code, err
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(out); err != nil {
		return code, fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
	}
	return code, nil
}

// send sends body (JSON, when not nil) and answers a 2xx answer's code,
// body and header; any other answer is an *APIError.
func (c *Client) send(ctx context.Context, method, path string, body any) (int, []byte, http.Header, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", "terraform-provider-rezuscloud/"+Version)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return resp.StatusCode, nil, nil, err
	}
	if resp.StatusCode/100 != 2 {
		e := &APIError{Code: resp.StatusCode}
		if json.Unmarshal(b, &e.Status) != nil || e.Status.Kind != "Status" {
			e.Status = domain.Status{Message: fmt.Sprintf("%s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(b)))}
		}
		return resp.StatusCode, nil, nil, e
	}
	return resp.StatusCode, b, resp.Header, nil
}

// object is an API object as JSON, kept whole: a write sends back every
// field it does not manage as the server had it.
type object = map[string]any

// get reads an object.
func (c *Client) get(ctx context.Context, path string) (object, error) {
	var o object
	_, err := c.do(ctx, http.MethodGet, path, nil, &o)
	return o, err
}
