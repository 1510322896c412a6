package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"go.yaml.in/yaml/v3"

	"github.com/rezuscloud/rezuscloud/domain"
)

// describeEvents is how many of an object's latest events describe shows.
const describeEvents = 10

func (r *rezusctl) describeCommand() *cli.Command {
	return &cli.Command{
		Name:  "describe",
		Usage: "show one object in detail: metadata, spec, status, conditions and its recent events",
		Description: "A machine also shows its config history: each config that reached it (the hash it holds,\n" +
			"and how it was applied: Day0, AppliedInPlace, AppliedWithReboot) and each that failed.\n" +
			"An upgrade also shows each machine's step and, for a step that waits, what it waits for,\n" +
			"the last answer, since when and its deadline (past it the step fails).\n\n" +
			"  rezusctl describe machine cp-0 -t acme\n" +
			"  rezusctl describe upgrade kubernetes-v1-36-1-4711 -t acme",
		ArgsUsage:    "KIND NAME",
		Flags:        []cli.Flag{tenantFlag()},
		BashComplete: completeKinds,
		Action: func(c *cli.Context) error {
			s, cl, err := r.connect(c)
			if err != nil {
				return err
			}
			k, tenant, name, err := kindAndName(c, s)
			if err != nil {
				return err
			}
			obj, err := cl.getObject(c.Context, k, tenant, name)
			if err != nil {
				return err
			}
			var b bytes.Buffer
			describeObject(&b, k, obj, r.env.Now())
			switch k.Kind {
			case domain.UpgradeKind.Kind:
				describeUpgradeMachines(&b, obj, r.env.Now())
			case domain.TenantKind.Kind:
				describeTenantCertificates(&b, obj, r.env.Now())
			}
			var history *configHistory
			var each func(record)
			if k.Kind == domain.MachineKind.Kind {
				history = newConfigHistory()
				each = history.add
			}
			events, evErr := objectEvents(c.Context, cl, k, obj, each)
			if history != nil {
				describeConfigHistory(&b, history, evErr)
			}
			describeEventsSection(&b, events, evErr)
			_, err = r.env.Stdout.Write(b.Bytes())
			return err
		},
	}
}

// kindAndName reads the KIND NAME arguments and the tenant of commands that
// act on one object.
func kindAndName(c *cli.Context, s *session) (k kind, tenant, name string, err error) {
	if c.NArg() != 2 {
		return kind{}, "", "", fmt.Errorf("give KIND NAME, e.g. rezusctl %s tenant acme", c.Command.Name)
	}
	if k, err = resolveKind(c.Args().Get(0)); err != nil {
		return kind{}, "", "", err
	}
	if k.TenantScoped {
		if tenant = s.tenant(c); tenant == "" {
			return kind{}, "", "", k.errTenantRequired(false)
		}
	}
	return k, tenant, c.Args().Get(1), nil
}

func describeObject(w io.Writer, k kind, o *domain.Object, now time.Time) {
	m := o.Metadata
	row := func(label, value string) {
		if value == "" {
			value = "<none>"
		}
		fmt.Fprintf(w, "%-18s %s\n", label+":", value)
	}
	row("Name", m.Name)
	row("Kind", o.Kind)
	if k.TenantScoped {
		row("Tenant", m.Tenant)
	}
	row("UID", m.UID)
	row("Resource Version", m.ResourceVersion)
	row("Generation", fmt.Sprint(m.Generation))
	if m.CreationTimestamp != nil {
		row("Created", fmt.Sprintf("%s (%s ago)", m.CreationTimestamp.UTC().Format(time.RFC3339), humanDuration(now.Sub(*m.CreationTimestamp))))
	}
	if m.DeletionTimestamp != nil {
		row("Deleting Since", m.DeletionTimestamp.UTC().Format(time.RFC3339))
	}
	row("Labels", mapLines(m.Labels))
	row("Annotations", mapLines(m.Annotations))
	row("Finalizers", strings.Join(m.Finalizers, ", "))

	fmt.Fprintln(w, "Spec:")
	if k.Kind == domain.ProviderKind.Kind {
		writeIndentedYAML(w, o.Spec, summarizeModuleFiles)
	} else {
		writeIndentedYAML(w, o.Spec)
	}

	// Conditions get a table of their own, so the status block leaves them out.
	var conds []domain.Condition
	var status struct {
		Conditions []domain.Condition `json:"conditions"`
	}
	if json.Unmarshal(o.Status, &status) == nil {
		conds = status.Conditions
	}
	fmt.Fprintln(w, "Status:")
	own := []string{"conditions"}
	if k.Kind == domain.TenantKind.Kind {
		own = append(own, "certificates") // describeTenantCertificates' table
	}
	writeIndentedYAML(w, o.Status, withoutKeys(own...))
	describeWait(w, o.Status, now)
	fmt.Fprintln(w, "Conditions:")
	if len(conds) == 0 {
		fmt.Fprintln(w, "  <none>")
	} else {
		rows := [][]string{{"TYPE", "STATUS", "REASON", "AGE", "MESSAGE"}}
		var long []domain.Condition
		for _, c := range conds {
			age := ""
			if !c.LastTransitionTime.IsZero() {
				age = humanDuration(now.Sub(c.LastTransitionTime))
			}
			msg := c.Message
			if lines := strings.Split(strings.TrimRight(msg, "\n"), "\n"); len(lines) > 1 {
				// A table row holds one line: a message of several (a module's
				// diagnostics, one per line) follows the table.
				msg = fmt.Sprintf("(%d lines, below)", len(lines))
				long = append(long, c)
			}
			rows = append(rows, []string{c.Type, c.Status, orNone(c.Reason), orNone(age), orNone(msg)})
		}
		indentTable(w, rows)
		for _, c := range long {
			fmt.Fprintf(w, "  %s message:\n", c.Type)
			for _, line := range strings.Split(strings.TrimRight(c.Message, "\n"), "\n") {
				fmt.Fprintf(w, "    %s\n", line)
			}
		}
	}
}

// objectEvents reads the object's latest events from the event stream; each,
// when set, sees every one of its events in order.
func objectEvents(ctx context.Context, cl *client, k kind, o *domain.Object, each func(record)) ([]record, error) {
	q := url.Values{"kind": {k.Kind}, "name": {o.Metadata.Name}}
	if k.TenantScoped {
		q.Set("tenant", o.Metadata.Tenant)
	}
	var mine []record
	err := fetchRecords(ctx, cl, "/api/v1/events", q, true, func(recs []record) error {
		// The filter is the server's; keep only this object's in case it is coarser.
		for _, r := range recs {
			if n := r.first("object.metadata.name", "name"); n == "" || n == o.Metadata.Name {
				mine = append(mine, r)
				if each != nil {
					each(r)
				}
			}
		}
		if len(mine) > describeEvents {
			mine = mine[len(mine)-describeEvents:]
		}
		return nil
	})
	return mine, err
}

func describeEventsSection(w io.Writer, events []record, err error) {
	fmt.Fprint(w, "Events:")
	switch {
	case err != nil && (httpCode(err) == http.StatusNotFound || httpCode(err) == http.StatusMethodNotAllowed):
		fmt.Fprintln(w, " not available")
		return
	case err != nil:
		fmt.Fprintf(w, " not available (%v)\n", err)
		return
	case len(events) == 0:
		fmt.Fprintln(w, " <none>")
		return
	}
	fmt.Fprintln(w)
	rows := [][]string{{"SEQ", "TIME", "ACTOR", "TYPE"}}
	for _, e := range events {
		rows = append(rows, []string{fmt.Sprint(e.Seq), orNone(recordTimeCell(e)), orNone(e.str("actor")), orNone(e.str("type"))})
	}
	indentTable(w, rows)
}

func indentTable(w io.Writer, rows [][]string) {
	var b bytes.Buffer
	t := table{w: &b}
	_ = t.write(rows)
	for _, line := range strings.SplitAfter(b.String(), "\n") {
		if line != "" {
			fmt.Fprint(w, "  "+line)
		}
	}
}

// writeIndentedYAML writes a JSON object as YAML indented under a heading,
// as the edits leave it.
func writeIndentedYAML(w io.Writer, raw json.RawMessage, edits ...func(*yaml.Node)) {
	n, err := yamlNode(raw)
	if err != nil || n.Kind != yaml.MappingNode {
		if len(bytes.TrimSpace(raw)) == 0 || string(raw) == "null" {
			fmt.Fprintln(w, "  <none>")
		} else {
			fmt.Fprintf(w, "  %s\n", raw)
		}
		return
	}
	for _, edit := range edits {
		edit(n)
	}
	if len(n.Content) == 0 {
		fmt.Fprintln(w, "  <none>")
		return
	}
	y, err := encodeYAML(n)
	if err != nil {
		fmt.Fprintf(w, "  %s\n", raw)
		return
	}
	for _, line := range strings.SplitAfter(string(y), "\n") {
		if line != "" {
			fmt.Fprint(w, "  "+line)
		}
	}
}

// withoutKeys is an edit of writeIndentedYAML leaving out the top-level keys
// named.
func withoutKeys(keys ...string) func(*yaml.Node) {
	return func(n *yaml.Node) {
		var kept []*yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if !slices.Contains(keys, n.Content[i].Value) {
				kept = append(kept, n.Content[i], n.Content[i+1])
			}
		}
		n.Content = kept
	}
}

func mapLines(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, "\n"+strings.Repeat(" ", 19))
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
