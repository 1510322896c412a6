package tfprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultTimeout bounds one call to the emulator API.
const DefaultTimeout = 30 * time.Second

// Client calls the Talos node emulator's HTTP API (emulator/httpapi.go).
// It declares its own wire types rather than importing the emulator, which
// would link Talos machinery and gRPC into the provider binary; the tests run
// it against the real emulator handler, so the two cannot drift apart.
type Client struct {
	endpoint string
	token    string
	http     *http.Client
}

// NewClient returns a client for the API at endpoint (an http or https URL)
// that authenticates with the API's bearer token; each call gives up after
// timeout (DefaultTimeout when zero).
func NewClient(endpoint, token string, timeout time.Duration) (*Client, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("endpoint %q must be an http:// or https:// URL with a host", endpoint)
	}
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	return &Client{endpoint: strings.TrimSuffix(endpoint, "/"), token: token, http: &http.Client{Timeout: timeout}}, nil
}

// NodeSpec is the emulator's NodeSpec: what creating a node needs.
type NodeSpec struct {
	Name     string `json:"name"`
	Cluster  string `json:"cluster,omitempty"`
	UserData []byte `json:"userData,omitempty"`
	Address  string `json:"address,omitempty"`
}

// Node is the part of the emulator's NodeStatus the provider reads.
type Node struct {
	Name    string `json:"name"`
	Cluster string `json:"cluster,omitempty"`
	// Address is host:port of the node's Talos API.
	Address string `json:"address"`
	Phase   string `json:"phase"`
	Version string `json:"version"`
}

// HostPort splits the node's address into its IP and Talos API port.
func (n Node) HostPort() (string, int, error) {
	host, port, err := net.SplitHostPort(n.Address)
	if err != nil {
		return "", 0, fmt.Errorf("node %s has address %q: %w", n.Name, n.Address, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return "", 0, fmt.Errorf("node %s has address %q: %w", n.Name, n.Address, err)
	}
	return host, p, nil
}

// Address is an emulator address reservation.
type Address struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	Node    string `json:"node,omitempty"`
}

// APIError is a failed call, carrying the emulator's Status answer.
type APIError struct {
	// Code is the HTTP status code.
	Code int
	// Reason is the Status reason ("AlreadyExists", "Invalid", ...), if the
	// answer was a Status.
	Reason string
	// Message is the Status message, or the start of the body otherwise.
	Message string
}

func (e *APIError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("%s (%s, HTTP %d)", e.Message, e.Reason, e.Code)
	}
	return fmt.Sprintf("%s (HTTP %d)", e.Message, e.Code)
}

// IsNotFound reports whether err is the emulator saying the object does not exist.
func IsNotFound(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Code == http.StatusNotFound
}

// IsAlreadyExists reports whether err is the emulator saying the name is taken.
func IsAlreadyExists(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Code == http.StatusConflict && e.Reason == "AlreadyExists"
}

// CreateNode boots a node.
func (c *Client) CreateNode(ctx context.Context, spec NodeSpec) (Node, error) {
	var n Node
	err := c.do(ctx, http.MethodPost, "/v1/nodes", spec, http.StatusCreated, &n)
	return n, err
}

// GetNode reads a node.
func (c *Client) GetNode(ctx context.Context, name string) (Node, error) {
	var n Node
	err := c.do(ctx, http.MethodGet, "/v1/nodes/"+url.PathEscape(name), nil, http.StatusOK, &n)
	return n, err
}

// DeleteNode stops a node and forgets it.
func (c *Client) DeleteNode(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/nodes/"+url.PathEscape(name), nil, http.StatusNoContent, nil)
}

// ReserveAddress reserves an address.
func (c *Client) ReserveAddress(ctx context.Context, name string) (Address, error) {
	var a Address
	err := c.do(ctx, http.MethodPost, "/v1/addresses", map[string]string{"name": name}, http.StatusCreated, &a)
	return a, err
}

// GetAddress reads a reservation.
func (c *Client) GetAddress(ctx context.Context, name string) (Address, error) {
	var a Address
	err := c.do(ctx, http.MethodGet, "/v1/addresses/"+url.PathEscape(name), nil, http.StatusOK, &a)
	return a, err
}

// ReleaseAddress gives a reservation up.
func (c *Client) ReleaseAddress(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/addresses/"+url.PathEscape(name), nil, http.StatusNoContent, nil)
}

// maxAnswer bounds what is read of an answer.
const maxAnswer = 1 << 20

func (c *Client) do(ctx context.Context, method, path string, body any, want int, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.endpoint+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("calling the emulator: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode != want {
		return apiError(resp.StatusCode, b)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}

// apiError reads a Kubernetes Status body, falling back to the raw body.
func apiError(code int, body []byte) error {
	var st struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
		Reason  string `json:"reason"`
	}
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" && st.Message != "" {
		return &APIError{Code: code, Reason: st.Reason, Message: st.Message}
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if msg == "" {
		msg = http.StatusText(code)
	}
	return &APIError{Code: code, Message: "the emulator answered: " + msg}
}
