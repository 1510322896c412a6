package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/domain"
)

func (r *rezusctl) deleteCommand() *cli.Command {
	return &cli.Command{
		Name:      "delete",
		Usage:     "delete an object",
		ArgsUsage: "KIND NAME",
		Description: "An object with finalizers (or a tenant that still has objects) is marked for deletion and goes\n" +
			"when they are done; --wait waits until it is gone.\n\n  rezusctl delete tenant acme --wait",
		Flags: []cli.Flag{
			tenantFlag(),
			&cli.BoolFlag{Name: "wait", Usage: "wait until the object is gone"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "with --wait, give up after this long"},
		},
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
			resp, err := cl.do(c.Context, request{method: http.MethodDelete, path: k.itemPath(tenant, name)})
			if err != nil {
				return err
			}
			var obj domain.Object
			decErr := json.NewDecoder(resp.Body).Decode(&obj)
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				fmt.Fprintf(r.env.Stdout, "%s/%s deleted\n", k.Singular, name)
				return nil
			}
			why := "deletion requested"
			if decErr == nil && len(obj.Metadata.Finalizers) > 0 {
				why += "; waiting for finalizers " + strings.Join(obj.Metadata.Finalizers, ", ")
			}
			if !c.Bool("wait") {
				fmt.Fprintf(r.env.Stdout, "%s/%s %s\n", k.Singular, name, why)
				return nil
			}
			fmt.Fprintf(r.env.Stderr, "%s/%s %s\n", k.Singular, name, why)
			ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
			defer cancel()
			if err := r.waitGone(ctx, cl, k, tenant, name, obj.Metadata.ResourceVersion); err != nil {
				if errors.Is(ctx.Err(), context.DeadlineExceeded) && c.Context.Err() == nil {
					return fmt.Errorf("timed out after %s waiting for %s to be deleted", c.Duration("timeout"), k.ref(tenant, name))
				}
				return err
			}
			fmt.Fprintf(r.env.Stdout, "%s/%s deleted\n", k.Singular, name)
			return nil
		},
	}
}

// errGone stops the watch of waitGone.
var errGone = errors.New("gone")

// waitGone waits until the object is deleted: it watches the collection from
// the version the DELETE answered, so the deletion cannot slip by between a
// check and the watch, and confirms with a GET first in case it went already.
func (r *rezusctl) waitGone(ctx context.Context, cl *client, k kind, tenant, name, rv string) error {
	if _, err := cl.getObject(ctx, k, tenant, name); isNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	err := r.stream(ctx, cl, k.collectionPath(tenant), url.Values{"watch": {"true"}}, "resourceVersion", rv, func(ev sseEvent) error {
		var we watchEvent
		if json.Unmarshal(ev.Data, &we) != nil || we.Type != "DELETED" {
			return nil
		}
		var o domain.Object
		if json.Unmarshal(we.Object, &o) == nil && o.Metadata.Name == name {
			return errGone
		}
		return nil
	})
	switch {
	case errors.Is(err, errGone):
		return nil
	case err != nil:
		return err
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return nil
}
