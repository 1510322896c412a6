package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/domain"
)

// healthCommand shows GET /api/v1/tenants/{tenant}/health.
func (r *rezusctl) healthCommand() *cli.Command {
	return &cli.Command{
		Name:      "health",
		Usage:     "show how healthy a tenant's cluster is, probed through the Talos API",
		ArgsUsage: "[TENANT]",
		Description: "The server probes every machine (version, apid, etcd and kubelet health, etcd membership and\n" +
			"quorum) and answers Ready, Degraded or Unreachable with the reasons. An answer up to 15 s old is\n" +
			"served from the server's memory unless --refresh asks for a new probe. TENANT defaults to --tenant\n" +
			"or the context's tenant.\n\n" +
			"  rezusctl health acme\n  rezusctl health acme --refresh -o yaml",
		Flags: []cli.Flag{
			tenantFlag(),
			&cli.BoolFlag{Name: "refresh", Usage: "probe now rather than answer from the last probe"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: outTable, Usage: "table, json or yaml"},
		},
		Action: r.health,
	}
}

func (r *rezusctl) health(c *cli.Context) error {
	format := c.String("output")
	switch format {
	case outTable, outJSON, outYAML:
	default:
		return fmt.Errorf("unknown output format %q: use table, json or yaml", format)
	}
	if c.NArg() > 1 {
		return errors.New("give one TENANT")
	}
	s, cl, err := r.connect(c)
	if err != nil {
		return err
	}
	tenant := c.Args().First()
	if tenant == "" {
		tenant = s.tenant(c)
	}
	if tenant == "" {
		return errors.New("give the TENANT (or --tenant/-t, or set one on the context)")
	}
	req := request{method: http.MethodGet, path: "/api/v1/tenants/" + tenant + "/health"}
	if c.Bool("refresh") {
		req.query = url.Values{"refresh": {"true"}}
	}
	var raw []byte
	if err := cl.call(c.Context, req, &raw); err != nil {
		return err
	}
	switch format {
	case outJSON:
		var b bytes.Buffer
		if err := json.Indent(&b, raw, "", "    "); err != nil {
			return fmt.Errorf("the server's health answer is not JSON: %w", err)
		}
		b.WriteByte('\n')
		_, err := r.env.Stdout.Write(b.Bytes())
		return err
	case outYAML:
		y, err := toYAML(raw)
		if err != nil {
			return err
		}
		_, err = r.env.Stdout.Write(y)
		return err
	}
	var h domain.TenantHealth
	if err := json.Unmarshal(raw, &h); err != nil {
		return fmt.Errorf("the server's health answer is not the JSON expected: %w", err)
	}
	return printHealth(r.env.Stdout, h, r.env.Now())
}

// printHealth writes the overall line, the reasons no machine row shows
// (etcd's), then a row per machine.
func printHealth(w io.Writer, h domain.TenantHealth, now time.Time) error {
	ready := 0
	for _, m := range h.Machines {
		if m.Ready {
			ready++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s, %d/%d machines ready", h.Tenant, h.State, ready, len(h.Machines))
	if h.Etcd.ReportedBy != "" {
		quorum := "quorum"
		if !h.Etcd.Quorum {
			quorum = "NO QUORUM"
		}
		voting := 0
		for _, mb := range h.Etcd.Members {
			if !mb.Learner {
				voting++
			}
		}
		fmt.Fprintf(&b, ", etcd %d/%d healthy (%s)", h.Etcd.Healthy, voting, quorum)
	}
	if k := h.Kubernetes; k != nil {
		switch {
		case k.Ready:
			fmt.Fprintf(&b, ", Kubernetes %s ready", orElse(k.Version, "API server"))
		default:
			b.WriteString(", Kubernetes NOT READY")
		}
	}
	fmt.Fprintf(&b, ", probed %s ago in %s", humanDuration(now.Sub(h.ObservedAt)), h.Duration)
	if h.Cached {
		b.WriteString(" (cached)")
	}
	b.WriteByte('\n')
	shown := map[string]bool{}
	for _, m := range h.Machines {
		for _, rs := range m.Reasons {
			shown[rs] = true
		}
	}
	for _, rs := range h.Reasons {
		if !shown[rs] {
			fmt.Fprintf(&b, "  %s\n", rs)
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if len(h.Machines) == 0 {
		return nil
	}
	rows := [][]string{{"MACHINE", "ROLE", "REACHABLE", "VERSION", "SERVICES", "ETCD", "NODE", "REASON"}}
	for _, m := range h.Machines {
		rows = append(rows, []string{m.Name, m.Role, fmt.Sprint(m.Reachable), orElse(m.TalosVersion, "<unknown>"),
			servicesCell(m), orElse(m.Etcd, "-"), orElse(m.Node, "-"), orElse(strings.Join(m.Reasons, "; "), "<none>")})
	}
	if _, err := io.WriteString(w, "\n"); err != nil {
		return err
	}
	return (&table{w: w}).write(rows)
}

// servicesCell is "ok" when every service checked is healthy, else the
// others with their state, e.g. "etcd=unhealthy,kubelet=starting".
func servicesCell(m domain.MachineHealth) string {
	if !m.Reachable {
		return "<unknown>"
	}
	var bad []string
	for _, s := range m.Services {
		if s.Healthy {
			continue
		}
		state := strings.ToLower(s.State)
		if s.State == "Running" {
			state = "unhealthy"
		}
		bad = append(bad, s.ID+"="+state)
	}
	if len(bad) == 0 {
		return "ok"
	}
	return strings.Join(bad, ",")
}

func orElse(s, none string) string {
	if s == "" {
		return none
	}
	return s
}
