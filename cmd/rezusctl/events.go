package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

// record is one entry of the event or audit stream as the CLI shows it. The
// JSON is kept whole for -o json|yaml; the fields are read leniently (see
// parseRecord) because both endpoints may still grow fields.
type record struct {
	Seq uint64
	Raw json.RawMessage
	f   map[string]json.RawMessage
}

// parseRecord reads one entry. A stream frame wrapped like a watch event,
// {"type": ..., "object": {<entry>}}, is unwrapped; the sequence comes from
// "sequence", "seq" or "id", else from the SSE id.
func parseRecord(raw json.RawMessage, sseID string) (record, error) {
	var f map[string]json.RawMessage
	if err := json.Unmarshal(raw, &f); err != nil {
		return record{}, fmt.Errorf("the server sent an entry that is not a JSON object: %w", err)
	}
	if inner, ok := f["object"]; ok {
		var g map[string]json.RawMessage
		if json.Unmarshal(inner, &g) == nil && (g["actor"] != nil || g["action"] != nil || g["method"] != nil) && g["time"] != nil {
			raw, f = inner, g
		}
	}
	rec := record{Raw: raw, f: f}
	for _, k := range []string{"sequence", "seq", "id"} {
		if n, ok := rec.uint(k); ok {
			rec.Seq = n
			break
		}
	}
	if rec.Seq == 0 && sseID != "" {
		rec.Seq, _ = strconv.ParseUint(sseID, 10, 64)
	}
	return rec, nil
}

// str reads a string (or a number, as text) field; path may go one object deep ("object.kind").
func (r record) str(path string) string {
	f := r.f
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		var g map[string]json.RawMessage
		if json.Unmarshal(f[p], &g) != nil {
			return ""
		}
		f = g
	}
	raw := f[parts[len(parts)-1]]
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}

func (r record) uint(key string) (uint64, bool) {
	s := r.str(key)
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil && s != ""
}

// first returns the first non-empty of several fields.
func (r record) first(paths ...string) string {
	for _, p := range paths {
		if v := r.str(p); v != "" {
			return v
		}
	}
	return ""
}

// parseRecords reads a replay answer: {"items": [...], "metadata":
// {"continue": "<seq>"}}, where continue, when set, asks for the next page.
// A bare JSON array of entries is taken too.
func parseRecords(b []byte) (recs []record, cont string, err error) {
	b = bytes.TrimSpace(b)
	var raws []json.RawMessage
	if len(b) > 0 && b[0] == '[' {
		if err := json.Unmarshal(b, &raws); err != nil {
			return nil, "", err
		}
	} else {
		var page struct {
			Metadata struct {
				Continue string `json:"continue"`
			} `json:"metadata"`
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return nil, "", fmt.Errorf("the server's answer is not JSON: %w", err)
		}
		raws, cont = page.Items, page.Metadata.Continue
	}
	recs = make([]record, 0, len(raws))
	for _, raw := range raws {
		rec, err := parseRecord(raw, "")
		if err != nil {
			return nil, "", err
		}
		recs = append(recs, rec)
	}
	return recs, cont, nil
}

// recordTimeCell shows an entry's time in UTC to the second.
func recordTimeCell(r record) string {
	s := r.first("time", "timestamp")
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC().Format(time.RFC3339)
	}
	return s
}

// eventObject names the object an event is about: kind/tenant/name.
func eventObject(r record) string {
	k := r.first("object.kind", "kind")
	t := r.first("object.metadata.tenant", "tenant")
	n := r.first("object.metadata.name", "name")
	parts := []string{strings.ToLower(k)}
	if t != "" {
		parts = append(parts, t)
	}
	return strings.Join(append(parts, n), "/")
}

var eventColumns = []recordColumn{
	{"SEQ", func(r record) string { return strconv.FormatUint(r.Seq, 10) }},
	{"TIME", recordTimeCell},
	{"ACTOR", func(r record) string { return r.str("actor") }},
	{"TYPE", func(r record) string { return r.str("type") }},
	{"OBJECT", eventObject},
}

var auditColumns = []recordColumn{
	{"TIME", recordTimeCell},
	{"ACTOR", func(r record) string { return r.str("actor") }},
	{"ROLE", func(r record) string { return r.str("role") }},
	{"METHOD", func(r record) string { return r.str("method") }},
	{"PATH", func(r record) string { return r.str("path") }},
	{"CODE", func(r record) string { return r.first("code", "status") }},
}

type recordColumn struct {
	Header string
	Value  func(record) string
}

// recordPrinter prints entries as a table, JSON or YAML.
type recordPrinter struct {
	p    *printer
	cols []recordColumn
	// last is the highest sequence printed; a resumed stream may repeat it.
	last uint64
}

func (rp *recordPrinter) print(recs []record) error {
	var fresh []record
	for _, rec := range recs {
		if rec.Seq != 0 {
			if rec.Seq <= rp.last {
				continue
			}
			rp.last = rec.Seq
		}
		fresh = append(fresh, rec)
	}
	if len(fresh) == 0 {
		return nil
	}
	switch rp.p.format {
	case outJSON, outYAML:
		for _, rec := range fresh {
			if err := rp.p.printDoc(rec.Raw); err != nil {
				return err
			}
		}
		return nil
	}
	var rows [][]string
	if !rp.p.started {
		var hdr []string
		for _, c := range rp.cols {
			hdr = append(hdr, c.Header)
		}
		rows = append(rows, hdr)
		rp.p.started = true
	}
	for _, rec := range fresh {
		var row []string
		for _, c := range rp.cols {
			v := c.Value(rec)
			if v == "" {
				v = "<none>"
			}
			row = append(row, v)
		}
		rows = append(rows, row)
	}
	return rp.p.table.write(rows)
}

// sinceValue turns --since into what the server takes: a sequence number and
// an RFC 3339 time pass through; a duration (10m, 2h) means that long ago.
func sinceValue(s string, now time.Time) (string, error) {
	if s == "" {
		return "", nil
	}
	if _, err := strconv.ParseUint(s, 10, 64); err == nil {
		return s, nil
	}
	if _, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return s, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d).UTC().Format(time.RFC3339), nil
	}
	return "", fmt.Errorf("--since %q: give a sequence number, an RFC 3339 time or a duration such as 10m", s)
}

func (r *rezusctl) eventsCommand() *cli.Command {
	return &cli.Command{
		Name:  "events",
		Usage: "replay the resource event stream (every change, with who made it)",
		Description: "  rezusctl events --since 1h\n  rezusctl events --kind nodegroup -t acme --name workers\n" +
			"  rezusctl events -f",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "since", Usage: "start at a sequence number, an RFC 3339 time, or a duration ago (10m)"},
			&cli.StringFlag{Name: "kind", Usage: "only this kind"},
			&cli.StringFlag{Name: "tenant", Aliases: []string{"t"}, Usage: "only this tenant"},
			&cli.StringFlag{Name: "name", Usage: "only objects of this name"},
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep streaming new events"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: outTable, Usage: "table, json or yaml"},
		},
		Action: func(c *cli.Context) error {
			q := url.Values{}
			if k := c.String("kind"); k != "" {
				kk, err := resolveKind(k)
				if err != nil {
					return err
				}
				q.Set("kind", kk.Kind)
			}
			for _, f := range []string{"tenant", "name"} {
				if v := c.String(f); v != "" {
					q.Set(f, v)
				}
			}
			return r.replay(c, "/api/v1/events", q, eventColumns)
		},
	}
}

func (r *rezusctl) auditCommand() *cli.Command {
	return &cli.Command{
		Name:        "audit",
		Usage:       "read the audit trail: every change and credential download, who, when, from where",
		Description: "  rezusctl audit --since 24h --actor alice\n  rezusctl audit -f",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "since", Usage: "from a sequence number, an RFC 3339 time, or a duration ago (24h)"},
			&cli.StringFlag{Name: "until", Usage: "up to an RFC 3339 time, or a duration ago"},
			&cli.StringFlag{Name: "actor", Usage: "only this user"},
			&cli.StringFlag{Name: "kind", Usage: "only this kind"},
			&cli.StringFlag{Name: "tenant", Aliases: []string{"t"}, Usage: "only this tenant"},
			&cli.IntFlag{Name: "limit", Usage: "at most this many records"},
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep streaming new records"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: outTable, Usage: "table, json or yaml"},
		},
		Action: func(c *cli.Context) error {
			q := url.Values{}
			if k := c.String("kind"); k != "" {
				kk, err := resolveKind(k)
				if err != nil {
					return err
				}
				q.Set("kind", kk.Kind)
			}
			for _, f := range []string{"actor", "tenant"} {
				if v := c.String(f); v != "" {
					q.Set(f, v)
				}
			}
			if u := c.String("until"); u != "" {
				v, err := sinceValue(u, r.env.Now())
				if err != nil {
					return fmt.Errorf("--until: %w", err)
				}
				q.Set("until", v)
			}
			if n := c.Int("limit"); n > 0 {
				q.Set("limit", strconv.Itoa(n))
			}
			return r.replay(c, "/api/v1/audit", q, auditColumns)
		},
	}
}

// replay reads a replayable stream (events, audit): one request for the
// history, or with --follow an SSE stream that resumes where it broke off.
func (r *rezusctl) replay(c *cli.Context, path string, q url.Values, cols []recordColumn) error {
	out := c.String("output")
	if out != outTable && out != outJSON && out != outYAML {
		return fmt.Errorf("unknown output format %q: use table, json or yaml", out)
	}
	since, err := sinceValue(c.String("since"), r.env.Now())
	if err != nil {
		return err
	}
	if since != "" {
		q.Set("since", since)
	}
	_, cl, err := r.connect(c)
	if err != nil {
		return err
	}
	rp := &recordPrinter{p: newPrinter(r.env.Stdout, out, kind{}, false, r.env.Now), cols: cols}
	if !c.Bool("follow") {
		n := 0
		err := fetchRecords(c.Context, cl, path, q, !c.IsSet("limit"), func(recs []record) error {
			n += len(recs)
			return rp.print(recs)
		})
		if err == nil && n == 0 && out == outTable {
			fmt.Fprintln(r.env.Stderr, "no entries")
		}
		return err
	}
	q.Set("follow", "true")
	return r.stream(c.Context, cl, path, q, "since", "", func(ev sseEvent) error {
		switch {
		case ev.Event == "ERROR":
			var we watchEvent
			_ = json.Unmarshal(ev.Data, &we)
			return streamError(we.Object)
		case ev.Event == "BOOKMARK" || len(ev.Data) == 0:
			return nil
		}
		rec, err := parseRecord(ev.Data, ev.ID)
		if err != nil {
			return err
		}
		return rp.print([]record{rec})
	})
}

// fetchRecords reads a replay, page by page (continue=<seq>) when all is
// set, handing each page to fn as it arrives.
func fetchRecords(ctx context.Context, cl *client, path string, q url.Values, all bool, fn func([]record) error) error {
	for {
		var raw []byte
		if err := cl.call(ctx, request{method: http.MethodGet, path: path, query: q}, &raw); err != nil {
			return err
		}
		recs, cont, err := parseRecords(raw)
		if err != nil {
			return err
		}
		if err := fn(recs); err != nil {
			return err
		}
		if cont == "" || !all {
			return nil
		}
		qq := url.Values{}
		for k, v := range q {
			qq[k] = v
		}
		qq.Set("continue", cont)
		q = qq
	}
}
