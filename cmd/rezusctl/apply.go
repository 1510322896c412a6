package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/domain"
)

func manifestFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "filename", Aliases: []string{"f"}, Usage: "a YAML or JSON file (several documents allowed), a directory of them, or - for stdin"},
		tenantFlag(),
	}
}

func (r *rezusctl) createCommand() *cli.Command {
	return &cli.Command{
		Name:  "create",
		Usage: "create the objects in files; fails for objects that exist",
		Description: "  rezusctl create -f tenant.yaml\n  rezusctl create -f nodegroups.yaml -t acme\n" +
			"  rezusctl create provider lab --from-dir ./mymodule --config emulator=http://127.0.0.1:8089",
		Flags:       manifestFlags(),
		Action:      func(c *cli.Context) error { return r.applyManifests(c, false) },
		Subcommands: []*cli.Command{r.createProviderCommand(), r.createCredentialCommand(), r.createNodeGroupCommand()},
	}
}

func (r *rezusctl) applyCommand() *cli.Command {
	return &cli.Command{
		Name:  "apply",
		Usage: "create or update the objects in files",
		Description: "Each document's kind picks the endpoint and metadata.tenant (or --tenant) the tenant. An object\n" +
			"that exists is replaced (PUT at its current resourceVersion): spec, labels and annotations become\n" +
			"the document's; finalizers are kept when the document does not list any. A conflict with a\n" +
			"concurrent writer is retried once.\n\n" +
			"  rezusctl apply -f cluster.yaml\n  rezusctl apply -f manifests/\n  cat ng.json | rezusctl apply -f - -t acme\n" +
			pruneHelp,
		Flags:  append(manifestFlags(), pruneFlags()...),
		Action: func(c *cli.Context) error { return r.applyManifests(c, true) },
	}
}

// applyManifests creates (or, with update, applies) every document, reports
// each result on stdout and each failure on stderr, and fails when any did.
func (r *rezusctl) applyManifests(c *cli.Context, update bool) error {
	if c.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: give files with -f", c.Args().Slice())
	}
	prune, err := pruneOptionsOf(c)
	if err != nil {
		return err
	}
	docs, err := readManifests(c.StringSlice("filename"), r.env.Stdin)
	if err != nil {
		return err
	}
	s, cl, err := r.connect(c)
	if err != nil {
		return err
	}
	a := applier{cl: cl, defaultTenant: s.tenant(c), explicitTenant: c.String("tenant")}
	failed := 0
	for _, d := range docs {
		var result string
		if update {
			result, err = a.apply(c.Context, d)
		} else {
			result, err = a.create(c.Context, d)
		}
		if err != nil {
			failed++
			r.reportDocument(d, err)
			continue
		}
		fmt.Fprintln(r.env.Stdout, result)
	}
	if failed > 0 {
		if prune.enabled {
			fmt.Fprintln(r.env.Stderr, "nothing pruned: not every document was applied")
		}
		return exitError{code: 1}
	}
	if prune.enabled {
		return r.prune(c.Context, a, docs, prune.selector)
	}
	return nil
}

// reportDocument prints why one document failed, naming it.
func (r *rezusctl) reportDocument(d document, err error) {
	fmt.Fprintf(r.env.Stderr, "%s (%s %q):\n", d.Source, d.Kind, d.Name)
	var se *statusError
	if errors.As(err, &se) {
		printStatus(r.env.Stderr, se)
		return
	}
	fmt.Fprintln(r.env.Stderr, "error:", err)
}

// applier writes documents to the API.
type applier struct {
	cl *client
	// defaultTenant is --tenant, else the context's tenant: used for
	// documents without metadata.tenant.
	defaultTenant string
	// explicitTenant is --tenant as given; a document naming another tenant is refused.
	explicitTenant string
}

// target works out where a document goes.
func (a applier) target(d document) (kind, string, error) {
	k, err := resolveKind(d.Kind)
	if err != nil {
		return kind{}, "", err
	}
	if d.APIVersion != "" && d.APIVersion != domain.APIVersion {
		return kind{}, "", fmt.Errorf("apiVersion %q is not supported: use %s", d.APIVersion, domain.APIVersion)
	}
	if !k.TenantScoped {
		if d.Tenant != "" {
			return kind{}, "", fmt.Errorf("%s are cluster-scoped: remove metadata.tenant", k.Plural)
		}
		return k, "", nil
	}
	tenant := d.Tenant
	switch {
	case tenant != "" && a.explicitTenant != "" && tenant != a.explicitTenant:
		return kind{}, "", fmt.Errorf("metadata.tenant %q does not match --tenant %q", tenant, a.explicitTenant)
	case tenant == "":
		tenant = a.defaultTenant
	}
	if tenant == "" {
		return kind{}, "", fmt.Errorf("%s are tenant-scoped: set metadata.tenant or give --tenant/-t", k.Plural)
	}
	return k, tenant, nil
}

func (a applier) create(ctx context.Context, d document) (string, error) {
	k, tenant, err := a.target(d)
	if err != nil {
		return "", err
	}
	meta := map[string]any{}
	if k.TenantScoped {
		meta["tenant"] = tenant
	}
	body, err := d.setMeta(k.Kind, domain.APIVersion, meta)
	if err != nil {
		return "", err
	}
	if err := a.cl.call(ctx, request{method: http.MethodPost, path: k.collectionPath(tenant), body: body}, nil); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s/%s created", k.Singular, d.Name), nil
}

// applyConflictRetries is how many times a conflict is retried from a fresh
// read: controllers write an object's status while a user applies its spec
// (a module provider's validator writes twice in its first second).
const applyConflictRetries = 4

// apply creates the object when it does not exist and replaces it at its
// current resourceVersion when it does; a conflict (someone else wrote in
// between, or created it first) is retried from a fresh read.
func (a applier) apply(ctx context.Context, d document) (string, error) {
	k, tenant, err := a.target(d)
	if err != nil {
		return "", err
	}
	for attempt := 0; ; attempt++ {
		result, err := a.applyOnce(ctx, d, k, tenant)
		if err != nil && isConflict(err) && attempt < applyConflictRetries {
			continue
		}
		return result, err
	}
}

func (a applier) applyOnce(ctx context.Context, d document, k kind, tenant string) (string, error) {
	cur, err := a.cl.getObject(ctx, k, tenant, d.Name)
	if isNotFound(err) {
		meta := map[string]any{"resourceVersion": nil}
		if k.TenantScoped {
			meta["tenant"] = tenant
		}
		body, err := d.setMeta(k.Kind, domain.APIVersion, meta)
		if err != nil {
			return "", err
		}
		if err := a.cl.call(ctx, request{method: http.MethodPost, path: k.collectionPath(tenant), body: body}, nil); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s/%s created", k.Singular, d.Name), nil
	}
	if err != nil {
		return "", err
	}
	meta := map[string]any{"resourceVersion": cur.Metadata.ResourceVersion}
	if k.TenantScoped {
		meta["tenant"] = tenant
	}
	if !d.hasMeta("finalizers") && len(cur.Metadata.Finalizers) > 0 {
		// Finalizers belong to controllers; a manifest that does not mention
		// them must not remove them.
		meta["finalizers"] = cur.Metadata.Finalizers
	}
	body, err := d.setMeta(k.Kind, domain.APIVersion, meta)
	if err != nil {
		return "", err
	}
	var out struct {
		Metadata domain.ObjectMeta `json:"metadata"`
	}
	if err := a.cl.call(ctx, request{method: http.MethodPut, path: k.itemPath(tenant, d.Name), body: body}, &out); err != nil {
		return "", err
	}
	if out.Metadata.ResourceVersion == cur.Metadata.ResourceVersion {
		return fmt.Sprintf("%s/%s unchanged", k.Singular, d.Name), nil
	}
	return fmt.Sprintf("%s/%s configured", k.Singular, d.Name), nil
}
