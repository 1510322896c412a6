package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"

	"github.com/urfave/cli/v2"
)

const pruneHelp = "\nWith --prune -l SELECTOR, objects of the kinds in the files (within the tenants the files\n" +
	"name, for tenant-scoped kinds) that match the selector and are not in the files are deleted,\n" +
	"as kubectl apply --prune does; nothing is pruned when a document fails:\n\n" +
	"  rezusctl apply -f clusters/ --prune -l managed-by=gitops"

func pruneFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "prune", Usage: "delete objects of the applied kinds that match -l and are not in the files"},
		&cli.StringFlag{Name: "selector", Aliases: []string{"l"}, Usage: "with --prune, the label selector of the objects to consider"},
	}
}

// pruneOptions are apply's --prune and -l after checking.
type pruneOptions struct {
	enabled  bool
	selector string
}

func pruneOptionsOf(c *cli.Context) (pruneOptions, error) {
	o := pruneOptions{enabled: c.Bool("prune"), selector: c.String("selector")}
	switch {
	case o.enabled && o.selector == "":
		return o, errors.New("--prune needs a label selector (-l): without one it would delete every object of the applied kinds not in the files")
	case !o.enabled && o.selector != "":
		return o, errors.New("-l selects the objects --prune may delete: give --prune too")
	}
	return o, nil
}

// pruneScope is one collection prune lists: a kind, and the tenant for
// tenant-scoped kinds.
type pruneScope struct {
	kind   kind
	tenant string
}

// objectKey names one object across kinds and tenants.
type objectKey struct{ kind, tenant, name string }

// pruneTarget is an object prune deletes.
type pruneTarget struct {
	scope pruneScope
	name  string
}

// pruneScopes returns the collections the documents touch and the objects
// they name, in the order of the documents.
func (a applier) pruneScopes(docs []document) ([]pruneScope, map[objectKey]bool, error) {
	var scopes []pruneScope
	seen := map[objectKey]bool{}
	keep := map[objectKey]bool{}
	for _, d := range docs {
		k, tenant, err := a.target(d)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", d.Source, err)
		}
		sc := pruneScope{kind: k, tenant: tenant}
		if sk := (objectKey{kind: k.Kind, tenant: tenant}); !seen[sk] {
			seen[sk] = true
			scopes = append(scopes, sc)
		}
		keep[objectKey{k.Kind, tenant, d.Name}] = true
	}
	return scopes, keep, nil
}

// pruneDecide is the pure part of prune: of the objects listed in a scope
// (already filtered by the selector), those the files do not name, sorted
// by name. An object already being deleted is left to its finalizers.
func pruneDecide(sc pruneScope, listed []item, keep map[objectKey]bool) []pruneTarget {
	var out []pruneTarget
	for _, it := range listed {
		m := it.Obj.Metadata
		if keep[objectKey{sc.kind.Kind, sc.tenant, m.Name}] || m.DeletionTimestamp != nil {
			continue
		}
		out = append(out, pruneTarget{scope: sc, name: m.Name})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// prune deletes the objects of the applied kinds that match selector and are
// not in docs. Tenant-scoped kinds are pruned in reverse order of the
// documents' kinds, so that node groups go before a tenant would.
func (r *rezusctl) prune(ctx context.Context, a applier, docs []document, selector string) error {
	scopes, keep, err := a.pruneScopes(docs)
	if err != nil {
		return err
	}
	var targets []pruneTarget
	for _, sc := range scopes {
		listed, _, err := listAll(ctx, a.cl, sc.kind, sc.tenant, selector, 500)
		if err != nil {
			return fmt.Errorf("listing %s to prune: %w", sc.kind.Plural, err)
		}
		targets = append(targets, pruneDecide(sc, listed, keep)...)
	}
	// Tenant-scoped objects first: a tenant with objects left is only marked.
	sort.SliceStable(targets, func(i, j int) bool {
		return targets[i].scope.kind.TenantScoped && !targets[j].scope.kind.TenantScoped
	})
	failed := 0
	for _, t := range targets {
		resp, err := a.cl.do(ctx, request{method: http.MethodDelete, path: t.scope.kind.itemPath(t.scope.tenant, t.name)})
		if isNotFound(err) {
			continue // gone meanwhile
		}
		if err != nil {
			failed++
			fmt.Fprintf(r.env.Stderr, "pruning %s:\n", t.scope.kind.ref(t.scope.tenant, t.name))
			var se *statusError
			if errors.As(err, &se) {
				printStatus(r.env.Stderr, se)
			} else {
				fmt.Fprintln(r.env.Stderr, "error:", err)
			}
			continue
		}
		resp.Body.Close()
		fmt.Fprintf(r.env.Stdout, "%s/%s pruned\n", t.scope.kind.Singular, t.name)
	}
	if failed > 0 {
		return exitError{code: 1}
	}
	return nil
}
