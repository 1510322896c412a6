package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/domain"
)

// Replicas are the servers running on the same data, from their heartbeats
// (GET /api/v1/replicas, admins only). They are no stored kind: no NAME, no
// watch, no selector.

// isReplicasKind reports whether get's KIND argument names the replicas.
func isReplicasKind(s string) bool {
	switch strings.ToLower(s) {
	case "replica", "replicas":
		return true
	}
	return false
}

// getReplicas is `get replicas`: each replica's release, age, last
// heartbeat, tenant count and schema level; -o wide adds its run ID, NATS
// node and a * on the replica that answered.
func (r *rezusctl) getReplicas(c *cli.Context) error {
	switch {
	case c.NArg() > 1:
		return errors.New("give replicas without a NAME: the list is short")
	case c.Bool("watch"), c.String("selector") != "":
		return errors.New("replicas cannot be watched or selected: they are heartbeats, not objects")
	}
	format := c.String("output")
	if err := checkOutput(format); err != nil {
		return err
	}
	_, cl, err := r.connect(c)
	if err != nil {
		return err
	}
	var raw []byte
	if err := cl.call(c.Context, request{method: http.MethodGet, path: "/api/v1/replicas"}, &raw); err != nil {
		return err
	}
	if format == outJSON || format == outYAML {
		return (&printer{w: r.env.Stdout, format: format}).printDoc(raw)
	}
	var l domain.ReplicaList
	if err := json.Unmarshal(raw, &l); err != nil {
		return fmt.Errorf("the server's replica list is not JSON: %w", err)
	}
	if len(l.Items) == 0 {
		fmt.Fprintln(r.env.Stderr, "no replicas: the server runs without heartbeats")
		return nil
	}
	return printReplicas(r.env.Stdout, l, format, r.env.Now())
}

// printReplicas writes the list as a table (wide: more columns) or names.
func printReplicas(w io.Writer, l domain.ReplicaList, format string, now time.Time) error {
	if format == outName {
		var b strings.Builder
		for _, it := range l.Items {
			b.WriteString("replica/" + it.Holder + "\n")
		}
		_, err := io.WriteString(w, b.String())
		return err
	}
	wide := format == outWide
	hdr := []string{"HOLDER", "VERSION", "STARTED", "HEARTBEAT", "TENANTS", "SCHEMA"}
	if wide {
		hdr = append(hdr, "ID", "NATS", "SELF")
	}
	rows := [][]string{hdr}
	for _, it := range l.Items {
		tenants := "<unknown>" // a release before 0.4.0 does not say
		if it.Tenants != nil {
			tenants = strconv.Itoa(*it.Tenants)
		}
		row := []string{it.Holder, orNone(it.Version), humanDuration(now.Sub(it.StartedAt)), humanDuration(now.Sub(it.Seen)),
			tenants, strconv.Itoa(it.SchemaLevel)}
		if wide {
			self := ""
			if it.Holder == l.Self {
				self = "*"
			}
			row = append(row, orNone(it.ID), orNone(it.NATSServer), self)
		}
		rows = append(rows, row)
	}
	return (&table{w: w}).write(rows)
}
