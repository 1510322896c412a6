package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/domain"
)

// Exit codes of diff, as kubectl diff: 0 no differences, 1 differences,
// anything above an error.
const (
	diffExitSame    = 0
	diffExitChanged = 1
	diffExitError   = 2
)

func (r *rezusctl) diffCommand() *cli.Command {
	return &cli.Command{
		Name:  "diff",
		Usage: "show what apply -f would change, as a unified diff per object",
		Description: "Each object is shown as apply would leave it (merged) against what the server has (live), with\n" +
			"the fields the server manages left out: resourceVersion, uid, generation, timestamps and status.\n" +
			"The document's spec is defaulted the way the server does, so a field left to its default is not a\n" +
			"difference. After a changed tenant, node group or config patch, '#' lines say what the change would\n" +
			"do to the machines (the server's dry run, ?dryRun=All: configs changing in place or with a reboot,\n" +
			"machines created or destroyed). Exit status: 0 no differences, 1 differences, 2 an error (as kubectl diff).\n\n" +
			"  rezusctl diff -f cluster.yaml\n  rezusctl diff -f manifests/ && echo up to date",
		Flags: manifestFlags(),
		// A usage error must not read as "there are differences".
		OnUsageError: func(c *cli.Context, err error, sub bool) error {
			return codedError{err: usageError(c, err, sub), code: diffExitError}
		},
		Action: r.diff,
	}
}

// codedError is an error reported as usual but ending the command with code.
type codedError struct {
	err  error
	code int
}

func (e codedError) Error() string { return e.err.Error() }
func (e codedError) Unwrap() error { return e.err }

func (r *rezusctl) diff(c *cli.Context) error {
	fail := func(err error) error { return codedError{err: err, code: diffExitError} }
	if c.NArg() > 0 {
		return fail(fmt.Errorf("unexpected arguments %q: give files with -f", c.Args().Slice()))
	}
	docs, err := readManifests(c.StringSlice("filename"), r.env.Stdin)
	if err != nil {
		return fail(err)
	}
	s, cl, err := r.connect(c)
	if err != nil {
		return fail(err)
	}
	a := applier{cl: cl, defaultTenant: s.tenant(c), explicitTenant: c.String("tenant")}
	failed, changed := 0, false
	for _, d := range docs {
		text, err := a.diff(c.Context, d)
		if err != nil {
			failed++
			r.reportDocument(d, err)
			continue
		}
		if text != "" {
			changed = true
			fmt.Fprint(r.env.Stdout, text)
		}
	}
	switch {
	case failed > 0:
		return exitError{code: diffExitError}
	case changed:
		return exitError{code: diffExitChanged}
	}
	return nil
}

// diff reads the live object of a document and returns the unified diff of
// what apply would change; "" when nothing.
func (a applier) diff(ctx context.Context, d document) (string, error) {
	k, tenant, err := a.target(d)
	if err != nil {
		return "", err
	}
	live, err := a.cl.getObject(ctx, k, tenant, d.Name)
	if isNotFound(err) {
		live, err = nil, nil
	}
	if err != nil {
		return "", err
	}
	text, err := diffDocument(k, tenant, d, live)
	if err != nil || text == "" || !impactKinds[k.Kind] {
		return text, err
	}
	imp, err := a.impact(ctx, d, k, tenant, live)
	switch {
	case err != nil:
		// The diff stands; what it would do is unknown, and said so (a
		// node group of a tenant the same manifests create, say).
		imp = &domain.ChangeImpact{Summary: "unknown: " + err.Error()}
	case imp == nil:
		// A server without the Talos service computes no impact.
		return text, nil
	}
	return text + impactText(k, tenant, d.Name, imp), nil
}

// impactKinds are the kinds whose dry run says what a change does to the
// machines.
var impactKinds = map[string]bool{"Tenant": true, "NodeGroup": true, "ConfigPatch": true}

// impact asks the server what applying d would do to the machines: the
// write apply would send, as a dry run (?dryRun=All), which stores nothing.
func (a applier) impact(ctx context.Context, d document, k kind, tenant string, live *domain.Object) (*domain.ChangeImpact, error) {
	meta := map[string]any{"resourceVersion": nil}
	method, path := http.MethodPost, k.collectionPath(tenant)
	if live != nil {
		meta["resourceVersion"] = live.Metadata.ResourceVersion
		if !d.hasMeta("finalizers") && len(live.Metadata.Finalizers) > 0 {
			meta["finalizers"] = live.Metadata.Finalizers
		}
		method, path = http.MethodPut, k.itemPath(tenant, d.Name)
	}
	if k.TenantScoped {
		meta["tenant"] = tenant
	}
	body, err := d.setMeta(k.Kind, domain.APIVersion, meta)
	if err != nil {
		return nil, err
	}
	var out struct {
		Impact      *domain.ChangeImpact `json:"impact"`
		ImpactError string               `json:"impactError"`
	}
	if err := a.cl.call(ctx, request{method: method, path: path, query: url.Values{"dryRun": {"All"}}, body: body}, &out); err != nil {
		return nil, err
	}
	if out.Impact == nil && out.ImpactError != "" {
		// The diff stands; what it would do is unknown, and said so.
		return &domain.ChangeImpact{Summary: "unknown: " + out.ImpactError}, nil
	}
	return out.Impact, nil
}

// impactText is the impact as comment lines after an object's diff: the
// summary, then each machine the change touches.
func impactText(k kind, tenant, name string, imp *domain.ChangeImpact) string {
	path := k.Singular + "/" + name
	if tenant != "" {
		path = k.Singular + "/" + tenant + "/" + name
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# impact of %s: %s\n", path, imp.Summary)
	switch {
	case imp.Plan != nil:
		fmt.Fprintf(&b, "#   tofu plan: %s\n", imp.Plan.Summary)
		for _, r := range imp.Plan.Resources {
			fmt.Fprintf(&b, "#     %s: %s\n", r.Address, r.Action)
		}
	case imp.PlanError != "":
		fmt.Fprintf(&b, "#   tofu plan: unknown: %s\n", imp.PlanError)
	}
	for _, m := range imp.Machines {
		if m.Action == domain.ImpactNone {
			continue
		}
		what := m.Action
		switch {
		case m.Action == domain.ImpactReconfigure:
			what = "config changes, no reboot"
		case m.Action == domain.ImpactReboot:
			what = "config changes, reboot (drained first)"
		}
		if m.Details != "" {
			what += ": " + m.Details
		}
		fmt.Fprintf(&b, "#   %s (%s): %s\n", m.Machine, m.NodeGroup, what)
	}
	return b.String()
}

// diffView is what diff compares of an object: what apply writes, in a fixed
// order. Server-managed fields are not in it.
type diffView struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   diffMeta        `json:"metadata"`
	Spec       json.RawMessage `json:"spec,omitempty"`
}

type diffMeta struct {
	Name        string            `json:"name"`
	Tenant      string            `json:"tenant,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Finalizers  []string          `json:"finalizers,omitempty"`
}

// diffDocument is the pure part of diff: the unified diff between live (nil
// when the object does not exist) and what applying d to it leaves, as YAML.
// The spec is normalised the way the server does (domain's NormalizeSpec,
// then CreateSpec or UpdateSpec), so defaults are no difference; a spec the
// server would refuse is an error naming the fields.
func diffDocument(k kind, tenant string, d document, live *domain.Object) (string, error) {
	var doc struct {
		Metadata struct {
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
			Finalizers  []string          `json:"finalizers"`
		} `json:"metadata"`
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(d.Raw, &doc); err != nil {
		return "", fmt.Errorf("reading the document: %w", err)
	}
	merged := diffView{APIVersion: domain.APIVersion, Kind: k.Kind, Spec: doc.Spec,
		Metadata: diffMeta{Name: d.Name, Tenant: tenant, Labels: doc.Metadata.Labels, Annotations: doc.Metadata.Annotations, Finalizers: doc.Metadata.Finalizers}}
	if live != nil && !d.hasMeta("finalizers") {
		merged.Metadata.Finalizers = live.Metadata.Finalizers // apply keeps them
	}
	if info := domainKind(k.Kind); info != nil && info.NormalizeSpec != nil {
		spec, causes := info.NormalizeSpec(doc.Spec)
		if len(causes) > 0 {
			return "", domain.NewInvalid(k.Kind, d.Name, causes)
		}
		switch {
		case live == nil && info.CreateSpec != nil:
			spec, causes = info.CreateSpec(spec)
		case live != nil && info.UpdateSpec != nil && len(live.Spec) > 0:
			spec, causes = info.UpdateSpec(live.Spec, spec)
		}
		if len(causes) > 0 {
			return "", domain.NewInvalid(k.Kind, d.Name, causes)
		}
		merged.Spec = spec
	}
	liveText, mergedText := "", ""
	path := k.Singular + "/" + d.Name
	if tenant != "" {
		path = k.Singular + "/" + tenant + "/" + d.Name
	}
	if live != nil {
		lv := diffView{APIVersion: domain.APIVersion, Kind: k.Kind, Spec: live.Spec,
			Metadata: diffMeta{Name: live.Metadata.Name, Tenant: live.Metadata.Tenant, Labels: live.Metadata.Labels,
				Annotations: live.Metadata.Annotations, Finalizers: live.Metadata.Finalizers}}
		if !k.TenantScoped {
			lv.Metadata.Tenant = ""
		}
		t, err := diffYAML(lv)
		if err != nil {
			return "", err
		}
		liveText = t
	}
	mergedText, err := diffYAML(merged)
	if err != nil {
		return "", err
	}
	if liveText == mergedText {
		return "", nil
	}
	return difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: diffLines(liveText), B: diffLines(mergedText),
		FromFile: "live/" + path, ToFile: "merged/" + path, Context: 3,
	})
}

// diffLines splits a text into lines that keep their newlines; an empty text
// has none (difflib.SplitLines would make it one empty line).
func diffLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// diffYAML renders a view as YAML with the keys of every map sorted, so that
// the server's key order and the document's do not count as a difference.
func diffYAML(v diffView) (string, error) {
	if len(v.Spec) > 0 {
		canon, err := canonicalJSON(v.Spec)
		if err != nil {
			return "", fmt.Errorf("reading spec: %w", err)
		}
		v.Spec = canon
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	y, err := toYAML(b)
	return string(y), err
}

// canonicalJSON re-encodes JSON with sorted keys, keeping numbers exact.
func canonicalJSON(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// domainKind is domain's description of a kind, nil for kinds domain does
// not define (users and API tokens belong to identity).
func domainKind(name string) *domain.KindInfo {
	for _, k := range domain.Kinds() {
		if strings.EqualFold(k.Kind, name) {
			return k
		}
	}
	return nil
}
