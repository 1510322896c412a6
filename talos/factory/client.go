package factory

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// maxAnswer bounds what is read of a factory's answer.
const maxAnswer = 64 << 10

// Client registers schematics with one Image Factory. The zero value is not
// usable; New makes one. Safe for concurrent use.
type Client struct {
	url  string
	http *http.Client

	mu    sync.Mutex
	known map[string]bool // IDs the factory confirmed, so each is posted once per process
}

// New returns a client of the factory at url (e.g. https://factory.talos.dev);
// hc nil is a client with a 30 s timeout.
func New(url string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	return &Client{url: strings.TrimSuffix(url, "/"), http: hc, known: map[string]bool{}}
}

// Register makes the factory know s. Posting a schematic is idempotent at
// the factory (it is content-addressed), so a registration lost to a crash
// is simply made again. An ID the factory computes differently from
// RezusCloud is an error: installers would be named by an ID it never
// built.
func (c *Client) Register(ctx context.Context, s *domain.Schematic) error {
	id := s.ID()
	c.mu.Lock()
	done := c.known[id]
	c.mu.Unlock()
	if done {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/schematics", bytes.NewReader(s.FactoryYAML()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/yaml")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("posting schematic %s: %w", id, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("reading the factory's answer: %w", err)
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("posting schematic %s: the factory answered %s: %s", id, resp.Status, strings.TrimSpace(string(body)))
	}
	var got struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		return fmt.Errorf("posting schematic %s: the factory's answer is not {\"id\": ...}: %w", id, err)
	}
	if got.ID != id {
		return fmt.Errorf("the factory names schematic %s %q: its schematic format is not the one RezusCloud hashes", id, got.ID)
	}
	c.mu.Lock()
	c.known[id] = true
	c.mu.Unlock()
	return nil
}
