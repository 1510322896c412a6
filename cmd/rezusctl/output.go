package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// Output formats of get.
const (
	outTable = "table"
	outWide  = "wide"
	outJSON  = "json"
	outYAML  = "yaml"
	outName  = "name"
)

func checkOutput(f string) error {
	switch f {
	case outTable, outWide, outJSON, outYAML, outName:
		return nil
	}
	return fmt.Errorf("unknown output format %q: use table, wide, json, yaml or name", f)
}

// item is an object as the server sent it (Raw, whose key order output keeps)
// and decoded (Obj, for tables).
type item struct {
	Raw json.RawMessage
	Obj *domain.Object
}

func newItem(raw json.RawMessage) (item, error) {
	obj := &domain.Object{}
	if err := json.Unmarshal(raw, obj); err != nil {
		return item{}, fmt.Errorf("the server sent an object that is not one: %w", err)
	}
	return item{Raw: raw, Obj: obj}, nil
}

// column is one table column: a header and how to read its cell.
type column struct {
	Header string
	Value  func(o *domain.Object, now time.Time) string
}

// field reads a value at a dotted path ("spec.count") of an object's spec or
// status and formats it for a table cell; missing values are "".
func field(path ...string) func(*domain.Object, time.Time) string {
	return func(o *domain.Object, _ time.Time) string {
		for _, p := range path {
			if v := lookup(o, p); v != "" {
				return v
			}
		}
		return ""
	}
}

func lookup(o *domain.Object, path string) string {
	part, rest, _ := strings.Cut(path, ".")
	var raw json.RawMessage
	switch part {
	case "spec":
		raw = o.Spec
	case "status":
		raw = o.Status
	default:
		return ""
	}
	if len(raw) == 0 {
		return ""
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return ""
	}
	for _, key := range strings.Split(rest, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = m[key]
	}
	return cell(v)
}

func cell(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case string:
		return t
	case bool:
		return strconv.FormatBool(t)
	case float64:
		return strconv.FormatFloat(t, 'f', -1, 64)
	default:
		b, _ := json.Marshal(t)
		return string(b)
	}
}

// kindColumns are the columns between NAME and AGE, per kind.
var kindColumns = map[string][]column{
	"Tenant": {
		{"TALOS", field("spec.talosVersion")},
		{"KUBERNETES", field("spec.kubernetesVersion")},
		{"PHASE", field("status.phase")},
	},
	"NodeGroup": {
		{"ROLE", field("spec.role")},
		{"COUNT", field("spec.count")},
		{"MIN", autoscalingCell("spec.autoscaling.minCount")},
		{"MAX", autoscalingCell("spec.autoscaling.maxCount")},
		{"TARGET", field("spec.count")},
		{"PROVIDER", field("spec.provider")},
	},
	"Machine": {
		{"NODEGROUP", field("spec.nodeGroup")},
		{"ROLE", field("spec.role")},
		{"ADDRESS", field("spec.address")},
		{"STAGE", field("status.stage")},
		{"READY", field("status.ready")},
	},
	"ConfigPatch": {
		{"TARGET", func(o *domain.Object, _ time.Time) string {
			k, n := lookup(o, "spec.target.kind"), lookup(o, "spec.target.name")
			if n != "" {
				return k + "/" + n
			}
			return k
		}},
		{"FORMAT", field("spec.format")},
		{"ENABLED", field("spec.enabled")},
	},
	"Provider": {
		{"TYPE", field("spec.type")},
		{"VALIDATED", providerValidatedCell},
	},
	"Apply": {
		{"OPERATION", field("spec.operation")},
		{"TRIGGER", field("spec.trigger")},
		{"PHASE", field("status.phase")},
		{"ADDED", field("status.resources.added")},
		{"CHANGED", field("status.resources.changed")},
		{"DESTROYED", field("status.resources.destroyed")},
	},
	"Upgrade": {
		{"TALOS", field("spec.talosVersion")},
		{"KUBERNETES", field("spec.kubernetesVersion")},
		{"PHASE", field("status.phase")},
		{"DONE", upgradeDone},
		{"CURRENT", field("status.current")},
	},
	"EtcdBackup": {
		{"TRIGGER", field("spec.trigger")},
		{"PHASE", field("status.phase")},
		{"SIZE", sizeCell("status.size")},
		{"REVISION", field("status.etcdRevision")},
		{"MEMBER", field("status.member")},
	},
	"Remediation": {
		{"NODEGROUP", field("spec.nodeGroup")},
		{"MACHINE", field("spec.machine")},
		{"PHASE", field("status.phase")},
		{"APPLY", field("status.apply")},
		{"REASON", field("spec.reason")},
		{"WAITING", remediationWaitCell},
	},
	"Rollout": {
		{"CHANGE", rolloutChangeCell},
		{"PHASE", field("status.phase")},
		{"DONE", rolloutDoneCell},
		{"FAILED", field("status.counts.failed")},
	},
	"Restore": {
		{"BACKUP", field("spec.backup")},
		{"PHASE", field("status.phase")},
		{"STAGE", field("status.stage")},
		{"MEMBER", field("status.member")},
	},
	"User": {
		{"ROLE", field("spec.role")},
		{"BINDINGS", bindingsCell},
	},
	"GroupBinding": {
		{"GROUPS", field("spec.groups")},
		{"ROLE", field("spec.role")},
		{"BINDINGS", bindingsCell},
	},
	"APIToken": {
		{"USER", field("spec.user", "spec.username")},
		{"EXPIRES", field("spec.expiresAt", "status.expiresAt", "spec.expires")},
		{"BINDINGS", bindingsCell},
	},
}

// kindWideColumns follow a kind's own columns with -o wide.
var kindWideColumns = map[string][]column{
	"Tenant": {
		{"DRIFTED", tenantDriftedCell},
		{"DRIFT", field("status.drift.summary")},
		{"CHECKED", since("status.drift.checkedAt")},
	},
	"Machine": {
		{"VERSION", field("status.talosVersion")},
		{"NODE", field("status.node")},
		{"CONFIG", machineConfigCell},
		{"SEEN", since("status.lastSeen")},
	},
}

// tenantDriftedCell is the status of a tenant's Drifted condition: True,
// False, or Unknown with the reason (the check failed).
func tenantDriftedCell(o *domain.Object, _ time.Time) string {
	var st domain.TenantStatus
	if len(o.Status) == 0 || json.Unmarshal(o.Status, &st) != nil {
		return ""
	}
	c := domain.FindCondition(st.Conditions, domain.ConditionDrifted)
	switch {
	case c == nil:
		return ""
	case c.Status == "Unknown":
		return c.Status + " (" + c.Reason + ")"
	}
	return c.Status
}

// sizeCell shows the byte count at path in binary units (12.5MiB).
func sizeCell(path string) func(*domain.Object, time.Time) string {
	return func(o *domain.Object, _ time.Time) string {
		n, err := strconv.ParseInt(lookup(o, path), 10, 64)
		if err != nil {
			return ""
		}
		return humanBytes(n)
	}
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// since shows how long ago the time at path was, as AGE does.
func since(path string) func(*domain.Object, time.Time) string {
	return func(o *domain.Object, now time.Time) string {
		t, err := time.Parse(time.RFC3339, lookup(o, path))
		if err != nil {
			return ""
		}
		return humanDuration(now.Sub(t))
	}
}

// columnsFor is the table layout of a kind: TENANT (across tenants), NAME,
// the kind's own columns (and its wide ones for -o wide), AGE, and LABELS for
// -o wide.
func columnsFor(k kind, allTenants, wide bool) []column {
	var cols []column
	if allTenants && k.TenantScoped {
		cols = append(cols, column{"TENANT", func(o *domain.Object, _ time.Time) string { return o.Metadata.Tenant }})
	}
	cols = append(cols, column{"NAME", func(o *domain.Object, _ time.Time) string { return o.Metadata.Name }})
	cols = append(cols, kindColumns[k.Kind]...)
	if wide {
		cols = append(cols, kindWideColumns[k.Kind]...)
	}
	cols = append(cols, column{"AGE", func(o *domain.Object, now time.Time) string {
		if o.Metadata.CreationTimestamp == nil {
			return ""
		}
		return humanDuration(now.Sub(*o.Metadata.CreationTimestamp))
	}})
	if wide {
		cols = append(cols, column{"LABELS", func(o *domain.Object, _ time.Time) string { return formatLabels(o.Metadata.Labels) }})
	}
	return cols
}

func formatLabels(l map[string]string) string {
	if len(l) == 0 {
		return ""
	}
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + l[k]
	}
	return strings.Join(parts, ",")
}

// humanDuration is kubectl's AGE: two units of precision at most, e.g. 45s,
// 3m20s, 5h10m, 12d, 2y30d.
func humanDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 120:
		return fmt.Sprintf("%ds", s)
	case s < 10*60:
		if s%60 == 0 {
			return fmt.Sprintf("%dm", s/60)
		}
		return fmt.Sprintf("%dm%ds", s/60, s%60)
	case s < 3*3600:
		return fmt.Sprintf("%dm", s/60)
	case s < 8*3600:
		if m := s % 3600 / 60; m != 0 {
			return fmt.Sprintf("%dh%dm", s/3600, m)
		}
		return fmt.Sprintf("%dh", s/3600)
	case s < 48*3600:
		return fmt.Sprintf("%dh", s/3600)
	case s < 8*86400:
		if h := s % 86400 / 3600; h != 0 {
			return fmt.Sprintf("%dd%dh", s/86400, h)
		}
		return fmt.Sprintf("%dd", s/86400)
	case s < 2*365*86400:
		return fmt.Sprintf("%dd", s/86400)
	case s < 8*365*86400:
		if dd := s % (365 * 86400) / 86400; dd != 0 {
			return fmt.Sprintf("%dy%dd", s/(365*86400), dd)
		}
		return fmt.Sprintf("%dy", s/(365*86400))
	}
	return fmt.Sprintf("%dy", s/(365*86400))
}

// table writes aligned columns. Rows can be added after the first ones were
// written (a watch): widths only grow, so a row is padded to the widest cell
// seen so far in its column.
type table struct {
	w      io.Writer
	widths []int
}

const tablePadding = 3

// write prints rows (the first may be the header), widening columns first so
// that rows written together line up.
func (t *table) write(rows [][]string) error {
	for _, r := range rows {
		for i, c := range r {
			if i >= len(t.widths) {
				t.widths = append(t.widths, 0)
			}
			if n := len([]rune(c)); n > t.widths[i] {
				t.widths[i] = n
			}
		}
	}
	var b bytes.Buffer
	for _, r := range rows {
		for i, c := range r {
			b.WriteString(c)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", t.widths[i]-len([]rune(c))+tablePadding))
			}
		}
		b.WriteByte('\n')
	}
	_, err := t.w.Write(b.Bytes())
	return err
}

// printer writes objects in one output format. It is used for a list (one
// call to print) and for a watch (a call per change).
type printer struct {
	w       io.Writer
	format  string
	kind    kind
	cols    []column
	now     func() time.Time
	table   table
	started bool
	// watchEvents adds an EVENT column (ADDED, MODIFIED, DELETED) to tables.
	watchEvents bool
}

func newPrinter(w io.Writer, format string, k kind, allTenants bool, now func() time.Time) *printer {
	return &printer{w: w, format: format, kind: k, cols: columnsFor(k, allTenants, format == outWide), now: now, table: table{w: w}}
}

// printList prints a list result: a table, names, or one List document.
func (p *printer) printList(items []item, listRV string) error {
	switch p.format {
	case outJSON, outYAML:
		return p.printDoc(listJSON(p.kind, items, listRV))
	}
	if len(items) == 0 && (p.format == outTable || p.format == outWide) {
		return nil // the caller says "no objects"
	}
	events := make([]string, len(items))
	for i := range events {
		events[i] = "ADDED"
	}
	return p.printRows(items, events)
}

// printOne prints one object, or in a watch one change.
func (p *printer) printOne(it item, eventType string) error {
	switch p.format {
	case outJSON, outYAML:
		return p.printDoc(it.Raw)
	}
	return p.printRows([]item{it}, []string{eventType})
}

func (p *printer) printRows(items []item, events []string) error {
	if p.format == outName {
		var b strings.Builder
		for _, it := range items {
			b.WriteString(p.kind.Singular + "/" + it.Obj.Metadata.Name + "\n")
		}
		_, err := io.WriteString(p.w, b.String())
		return err
	}
	var rows [][]string
	if !p.started {
		var hdr []string
		if p.watchEvents {
			hdr = append(hdr, "EVENT")
			p.table.widths = []int{len("MODIFIED")} // the widest type, known before it comes
		}
		for _, c := range p.cols {
			hdr = append(hdr, c.Header)
		}
		rows = append(rows, hdr)
		p.started = true
	}
	now := p.now()
	for i, it := range items {
		var r []string
		if p.watchEvents {
			ev := ""
			if i < len(events) {
				ev = events[i]
			}
			r = append(r, ev)
		}
		for _, c := range p.cols {
			v := c.Value(it.Obj, now)
			if v == "" {
				v = "<none>"
			}
			r = append(r, v)
		}
		rows = append(rows, r)
	}
	return p.table.write(rows)
}

// printDoc writes one JSON document as indented JSON or as YAML; YAML
// documents after the first are separated by ---.
func (p *printer) printDoc(raw []byte) error {
	var b bytes.Buffer
	if p.format == outYAML {
		y, err := toYAML(raw)
		if err != nil {
			return err
		}
		if p.started {
			b.WriteString("---\n")
		}
		b.Write(y)
	} else {
		if err := json.Indent(&b, raw, "", "    "); err != nil {
			return err
		}
		b.WriteByte('\n')
	}
	p.started = true
	_, err := p.w.Write(b.Bytes())
	return err
}

// listJSON builds the List document of -o json|yaml from items.
func listJSON(k kind, items []item, rv string) []byte {
	var b bytes.Buffer
	meta, _ := json.Marshal(map[string]string{"resourceVersion": rv})
	fmt.Fprintf(&b, `{"apiVersion":%q,"kind":%q,"metadata":%s,"items":[`, domain.APIVersion, k.Kind+"List", meta)
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(it.Raw)
	}
	b.WriteString("]}")
	return b.Bytes()
}

// bindingsCell shows tenant bindings as role:names or role:{selector},
// separated by "; " (empty: none).
func bindingsCell(o *domain.Object, _ time.Time) string {
	var spec struct {
		Bindings []domain.RoleBinding `json:"bindings"`
	}
	if json.Unmarshal(o.Spec, &spec) != nil {
		return ""
	}
	parts := make([]string, 0, len(spec.Bindings))
	for _, b := range spec.Bindings {
		if b.TenantSelector != "" {
			parts = append(parts, b.Role+":{"+b.TenantSelector+"}")
		} else {
			parts = append(parts, b.Role+":"+strings.Join(b.Tenants, ","))
		}
	}
	return strings.Join(parts, "; ")
}

// remediationWaitCell is the WAITING column of remediations: what a Joining
// one waits for, since when, and when it fails.
func remediationWaitCell(o *domain.Object, now time.Time) string {
	var st domain.RemediationStatus
	if json.Unmarshal(o.Status, &st) != nil {
		return ""
	}
	return st.Wait.Message(now)
}
