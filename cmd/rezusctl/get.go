package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/domain"
)

func (r *rezusctl) getCommand() *cli.Command {
	return &cli.Command{
		Name:      "get",
		Usage:     "list objects of a kind, or show one",
		ArgsUsage: "KIND [NAME]",
		Description: "KIND is a kind's plural, singular or short name: tenants (tn), nodegroups (ng), machines (mc),\n" +
			"configpatches (cp), providers (pv), users, apitokens (token); also credentials and replicas (admins).\n\n" +
			"  rezusctl get tenants\n  rezusctl get ng -t acme -o yaml\n  rezusctl get machines -A -l role=worker -w",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: outTable, Usage: "table, wide, json, yaml or name"},
			&cli.StringFlag{Name: "selector", Aliases: []string{"l"}, Usage: "label selector, e.g. env=prod,tier in (a,b)"},
			&cli.BoolFlag{Name: "watch", Aliases: []string{"w"}, Usage: "after listing, stream changes as they happen"},
			&cli.BoolFlag{Name: "output-watch-events", Usage: "with --watch, show each change's type (ADDED, MODIFIED, DELETED)"},
			tenantFlag(),
			&cli.BoolFlag{Name: "all-tenants", Aliases: []string{"A"}, Usage: "list a tenant-scoped kind across all tenants"},
			&cli.IntFlag{Name: "chunk-size", Value: 500, Usage: "list in pages of this many objects (0: one request)"},
		},
		BashComplete: completeKinds,
		Action:       r.get,
	}
}

// getOptions are get's flags after checking.
type getOptions struct {
	kind       kind
	name       string
	tenant     string
	allTenants bool
	selector   string
	output     string
	chunk      int
}

func (r *rezusctl) getOptions(c *cli.Context, s *session) (getOptions, error) {
	args := c.Args().Slice()
	if len(args) < 1 || len(args) > 2 {
		return getOptions{}, fmt.Errorf("give KIND [NAME], e.g. rezusctl get tenants (kinds: %s)", kindNamesShort())
	}
	k, err := resolveKind(args[0])
	if err != nil {
		return getOptions{}, err
	}
	o := getOptions{kind: k, selector: c.String("selector"), output: c.String("output"), chunk: c.Int("chunk-size")}
	if len(args) == 2 {
		o.name = args[1]
	}
	if err := checkOutput(o.output); err != nil {
		return o, err
	}
	if k.TenantScoped {
		o.allTenants = c.Bool("all-tenants")
		if !o.allTenants {
			if o.tenant = s.tenant(c); o.tenant == "" {
				return o, k.errTenantRequired(true)
			}
		}
		if o.allTenants && o.name != "" {
			return o, errors.New("a NAME cannot be given with --all-tenants: name the tenant with --tenant")
		}
	}
	return o, nil
}

func (r *rezusctl) get(c *cli.Context) error {
	if isCredentialsKind(c.Args().First()) {
		return r.getCredentials(c)
	}
	if isReplicasKind(c.Args().First()) {
		return r.getReplicas(c)
	}
	s, cl, err := r.connect(c)
	if err != nil {
		return err
	}
	o, err := r.getOptions(c, s)
	if err != nil {
		return err
	}
	p := newPrinter(r.env.Stdout, o.output, o.kind, o.allTenants, r.env.Now)
	p.watchEvents = c.Bool("output-watch-events")
	ctx := c.Context
	var rv string
	if o.name != "" {
		it, err := getItem(ctx, cl, o.kind, o.tenant, o.name)
		if err != nil {
			return err
		}
		if err := p.printOne(it, "ADDED"); err != nil {
			return err
		}
		rv = it.Obj.Metadata.ResourceVersion
	} else {
		items, listRV, err := listAll(ctx, cl, o.kind, o.tenant, o.selector, o.chunk)
		if err != nil {
			return err
		}
		if len(items) == 0 && (o.output == outTable || o.output == outWide) && !c.Bool("watch") {
			fmt.Fprintln(r.env.Stderr, noObjects(o.kind, o.tenant))
			return nil
		}
		if err := p.printList(items, listRV); err != nil {
			return err
		}
		rv = listRV
	}
	if !c.Bool("watch") {
		return nil
	}
	return r.watchObjects(ctx, cl, o, rv, p)
}

func noObjects(k kind, tenant string) string {
	if k.TenantScoped && tenant != "" {
		return fmt.Sprintf("no %s in tenant %q", k.Plural, tenant)
	}
	return "no " + k.Plural
}

// watchObjects prints each change after rv until ctx ends.
func (r *rezusctl) watchObjects(ctx context.Context, cl *client, o getOptions, rv string, p *printer) error {
	q := url.Values{"watch": {"true"}}
	if o.selector != "" {
		q.Set("labelSelector", o.selector)
	}
	return r.stream(ctx, cl, o.kind.collectionPath(o.tenant), q, "resourceVersion", rv, func(ev sseEvent) error {
		var we watchEvent
		if err := json.Unmarshal(ev.Data, &we); err != nil {
			return fmt.Errorf("the server sent a watch event that is not JSON: %w", err)
		}
		switch we.Type {
		case "BOOKMARK":
			return nil
		case "ERROR":
			return streamError(we.Object)
		}
		it, err := newItem(we.Object)
		if err != nil {
			return err
		}
		if o.name != "" && it.Obj.Metadata.Name != o.name {
			return nil
		}
		return p.printOne(it, we.Type)
	})
}

// streamError is the error an ERROR event carries: a Status, such as 410
// Gone when the stream no longer holds the version asked for.
func streamError(obj json.RawMessage) error {
	var st domain.Status
	if json.Unmarshal(obj, &st) == nil && st.Kind == "Status" {
		return &statusError{Code: st.Code, Status: st}
	}
	return errors.New("the stream failed: " + string(obj))
}

// getItem reads one object, keeping the server's bytes.
func getItem(ctx context.Context, cl *client, k kind, tenant, name string) (item, error) {
	var raw []byte
	if err := cl.call(ctx, request{method: http.MethodGet, path: k.itemPath(tenant, name)}, &raw); err != nil {
		return item{}, err
	}
	return newItem(raw)
}

// listAll lists a collection page by page (limit/continue) and returns every
// item and the resourceVersion of the first page, from which a watch starts.
// tenant "" lists a tenant-scoped kind across tenants.
func listAll(ctx context.Context, cl *client, k kind, tenant, selector string, chunk int) ([]item, string, error) {
	var (
		items []item
		rv    string
		cont  string
	)
	for {
		q := url.Values{}
		if selector != "" {
			q.Set("labelSelector", selector)
		}
		if chunk > 0 {
			q.Set("limit", strconv.Itoa(chunk))
		}
		if cont != "" {
			q.Set("continue", cont)
		}
		var page struct {
			Metadata domain.ListMeta   `json:"metadata"`
			Items    []json.RawMessage `json:"items"`
		}
		if err := cl.call(ctx, request{method: http.MethodGet, path: k.collectionPath(tenant), query: q}, &page); err != nil {
			return nil, "", err
		}
		if rv == "" {
			rv = page.Metadata.ResourceVersion
		}
		for _, raw := range page.Items {
			it, err := newItem(raw)
			if err != nil {
				return nil, "", err
			}
			items = append(items, it)
		}
		if cont = page.Metadata.Continue; cont == "" {
			return items, rv, nil
		}
	}
}

// completeKinds offers kind names for shell completion of KIND arguments.
func completeKinds(c *cli.Context) {
	if c.NArg() > 0 {
		return
	}
	for _, n := range kindNames() {
		fmt.Fprintln(c.App.Writer, n)
	}
}

func kindNamesShort() string {
	return "tenants, nodegroups, machines, configpatches, providers, users, apitokens"
}
