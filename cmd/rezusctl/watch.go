package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// sseEvent is one Server-Sent Event: the id (a resourceVersion or stream
// sequence), the event name and the data lines joined.
type sseEvent struct {
	ID    string
	Event string
	Data  []byte
}

// readSSE reads events from a text/event-stream body until it ends. Comment
// lines (heartbeats) are skipped. An error returned by fn ends the read and is
// returned wrapped in handlerError, so callers can tell it from a broken stream.
func readSSE(body io.Reader, fn func(sseEvent) error) error {
	br := bufio.NewReaderSize(body, 64<<10)
	var ev sseEvent
	var data []string
	for {
		line, err := br.ReadString('\n')
		if err != nil && (line == "" || !errors.Is(err, io.EOF)) {
			return err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if len(data) > 0 || ev.Event != "" {
				ev.Data = []byte(strings.Join(data, "\n"))
				if ferr := fn(ev); ferr != nil {
					return handlerError{ferr}
				}
			}
			ev, data = sseEvent{ID: ev.ID}, nil // the id carries over, as in EventSource
		case strings.HasPrefix(line, ":"):
		default:
			name, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch name {
			case "id":
				ev.ID = value
			case "event":
				ev.Event = value
			case "data":
				data = append(data, value)
			}
		}
		if err != nil {
			return err // io.EOF after a last line without a newline
		}
	}
}

// handlerError is an error from the caller's event handler, not the stream.
type handlerError struct{ err error }

func (e handlerError) Error() string { return e.err.Error() }
func (e handlerError) Unwrap() error { return e.err }

// stream follows a Server-Sent Events endpoint. When the connection drops or
// the server ends the stream, it reconnects with the last event id (as
// resourceVersion=N and Last-Event-ID), so no change is missed or repeated;
// the pause between attempts doubles from env.WatchRetry up to 5 s, and a
// server that cannot be reached for env.WatchGiveUp fails the stream. resume
// names the query parameter that carries the last id ("resourceVersion" for
// watches, "since" for event and audit streams). It returns nil when ctx ends.
func (r *rezusctl) stream(ctx context.Context, c *client, path string, q url.Values, resume, lastID string, fn func(sseEvent) error) error {
	pause := r.env.WatchRetry
	var failingSince time.Time
	for {
		qq := url.Values{}
		for k, v := range q {
			qq[k] = v
		}
		hdr := http.Header{"Accept": {"text/event-stream"}}
		if lastID != "" {
			qq.Set(resume, lastID)
			hdr.Set("Last-Event-ID", lastID)
		}
		resp, err := c.do(ctx, request{method: http.MethodGet, path: path, query: qq, header: hdr})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			var ne *networkError
			code := httpCode(err)
			if !errors.As(err, &ne) && code != http.StatusServiceUnavailable && code != http.StatusTooManyRequests {
				return err
			}
			if failingSince.IsZero() {
				failingSince = time.Now()
			} else if time.Since(failingSince) > r.env.WatchGiveUp {
				return err
			}
		} else {
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
				resp.Body.Close()
				return errors.New("the server does not stream " + path + " (answered " + ct + ")")
			}
			got := false
			err = readSSE(resp.Body, func(ev sseEvent) error {
				got = true
				if ev.ID != "" {
					lastID = ev.ID
				}
				return fn(ev)
			})
			resp.Body.Close()
			var he handlerError
			if errors.As(err, &he) {
				return he.err
			}
			if ctx.Err() != nil {
				return nil
			}
			if got {
				failingSince, pause = time.Time{}, r.env.WatchRetry
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
		if pause *= 2; pause > 5*time.Second {
			pause = 5 * time.Second
		}
	}
}

// watchEvent is the data of a watch event: {"type", "object"}.
type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}
