package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/domain"
)

// backupCommand takes, lists and downloads a tenant's etcd backups
// (EtcdBackup objects the server's backup controller takes).
func (r *rezusctl) backupCommand() *cli.Command {
	return &cli.Command{
		Name:  "backup",
		Usage: "take, list and download a tenant's etcd backups",
		Description: "Backups are etcd snapshots taken through the Talos API and kept sealed in the server's\n" +
			"object store. The tenant's spec.etcdBackup schedules them; these commands act by hand.\n\n" +
			"  rezusctl backup create -t acme --wait\n" +
			"  rezusctl backup list -t acme\n" +
			"  rezusctl backup download -t acme manual-20260102-030405 -o acme.snapshot",
		Subcommands: []*cli.Command{
			{
				Name: "create", Usage: "take a backup now", ArgsUsage: "[NAME]",
				Flags: []cli.Flag{tenantFlag(),
					&cli.BoolFlag{Name: "wait", Aliases: []string{"w"}, Usage: "wait until the backup has Succeeded or Failed"},
					&cli.DurationFlag{Name: "timeout", Usage: "give up waiting after this long (0: no limit)"}},
				Action: r.backupCreate,
			},
			{
				Name: "list", Usage: "list the tenant's backups", Aliases: []string{"ls"},
				Flags:  []cli.Flag{tenantFlag(), &cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "table, wide, name, json or yaml", Value: outTable}},
				Action: r.backupList,
			},
			{
				Name: "download", Usage: "write a backup's snapshot to a file (mode 0600)", ArgsUsage: "NAME",
				Flags:  []cli.Flag{tenantFlag(), &cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "`FILE` to write (default <tenant>-<name>.snapshot), or - for stdout"}},
				Action: r.backupDownload,
			},
		},
	}
}

// restoreCommand restores a tenant's etcd from a backup.
func (r *rezusctl) restoreCommand() *cli.Command {
	return &cli.Command{
		Name:  "restore",
		Usage: "recover a tenant whose control planes lost etcd from a backup",
		Description: "Creates a Restore: the server checks the backup opens whole, uploads it to the first control\n" +
			"plane, bootstraps etcd from it, waits for the other control planes to join and checks the\n" +
			"revision. --wait follows it; the exit code is 0 only when it succeeds.\n\n" +
			"  rezusctl restore -t acme --backup sched-20260102-0600 --wait",
		Flags: []cli.Flag{tenantFlag(),
			&cli.StringFlag{Name: "backup", Usage: "`NAME` of the EtcdBackup to restore", Required: true},
			&cli.BoolFlag{Name: "wait", Aliases: []string{"w"}, Usage: "wait until the restore has Succeeded or Failed"},
			&cli.DurationFlag{Name: "timeout", Usage: "give up waiting after this long (0: no limit)"}},
		Action: r.restore,
	}
}

// backupTenant connects and reads the tenant flag.
func (r *rezusctl) backupTenant(c *cli.Context) (*client, string, error) {
	s, cl, err := r.connect(c)
	if err != nil {
		return nil, "", err
	}
	tenant := s.tenant(c)
	if tenant == "" {
		return nil, "", errors.New("give the tenant with --tenant/-t (or set one on the context)")
	}
	return cl, tenant, nil
}

func (r *rezusctl) backupCreate(c *cli.Context) error {
	if c.NArg() > 1 {
		return errors.New("give at most one name: rezusctl backup create -t TENANT [NAME]")
	}
	cl, tenant, err := r.backupTenant(c)
	if err != nil {
		return err
	}
	k, err := resolveKind("etcdbackups")
	if err != nil {
		return err
	}
	name := c.Args().First()
	if name == "" {
		name = "manual-" + r.env.Now().UTC().Format("20060102-150405")
	}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"name": name}, "spec": map[string]any{"trigger": domain.BackupManual}})
	created := &domain.Object{}
	if err := cl.call(c.Context, request{method: http.MethodPost, path: k.collectionPath(tenant), body: body}, created); err != nil {
		return err
	}
	fmt.Fprintf(r.env.Stdout, "etcdbackup/%s created\n", created.Metadata.Name)
	if !c.Bool("wait") {
		return nil
	}
	return r.waitFinal(c, cl, k, tenant, created.Metadata.Name, func(st map[string]any) string {
		if st["phase"] == domain.BackupSucceeded {
			return fmt.Sprintf("etcdbackup/%s Succeeded: %s from %v, revision %v", created.Metadata.Name, humanBytes(toInt(st["size"])), st["member"], dash(st["etcdRevision"]))
		}
		return ""
	})
}

func (r *rezusctl) restore(c *cli.Context) error {
	cl, tenant, err := r.backupTenant(c)
	if err != nil {
		return err
	}
	k, err := resolveKind("restores")
	if err != nil {
		return err
	}
	body, _ := json.Marshal(map[string]string{"backup": c.String("backup")})
	created := &domain.Object{}
	if err := cl.call(c.Context, request{method: http.MethodPost, path: "/api/v1/tenants/" + tenant + "/restore", body: body}, created); err != nil {
		return err
	}
	fmt.Fprintf(r.env.Stdout, "restore/%s created: tenant %q from backup %q\n", created.Metadata.Name, tenant, c.String("backup"))
	if !c.Bool("wait") {
		return nil
	}
	return r.waitFinal(c, cl, k, tenant, created.Metadata.Name, func(st map[string]any) string {
		if st["phase"] == domain.RestoreSucceeded {
			return fmt.Sprintf("restore/%s Succeeded: etcd recovered on %v at revision %v, %v control planes members", created.Metadata.Name, st["member"], dash(st["etcdRevision"]), st["members"])
		}
		return ""
	})
}

// waitFinal polls the object until its phase is Succeeded or Failed,
// printing each new phase or stage; done says what to print on success.
func (r *rezusctl) waitFinal(c *cli.Context, cl *client, k kind, tenant, name string, done func(st map[string]any) string) error {
	ctx := c.Context
	if d := c.Duration("timeout"); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	last := ""
	for {
		o, err := cl.getObject(ctx, k, tenant, name)
		if err != nil {
			return err
		}
		var st map[string]any
		_ = json.Unmarshal(o.Status, &st)
		now := fmt.Sprintf("%v %v", st["phase"], dash(st["stage"]))
		line := now
		if w := statusWait(o.Status); w != nil {
			// Printed again when the answer changes, not as the clock runs.
			now += "\x00" + w.For + "\x00" + w.LastError
			line += ": " + w.Message(r.env.Now())
		}
		if now != last {
			fmt.Fprintf(r.env.Stderr, "%s/%s: %s\n", k.Singular, name, line)
			last = now
		}
		switch st["phase"] {
		case "Succeeded":
			fmt.Fprintln(r.env.Stdout, done(st))
			return nil
		case "Failed":
			return fmt.Errorf("%s/%s failed: %v", k.Singular, name, st["reason"])
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped waiting for %s/%s: %w", k.Singular, name, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

func (r *rezusctl) backupList(c *cli.Context) error {
	cl, tenant, err := r.backupTenant(c)
	if err != nil {
		return err
	}
	k, err := resolveKind("etcdbackups")
	if err != nil {
		return err
	}
	items, rv, err := listAll(c.Context, cl, k, tenant, "", 0)
	if err != nil {
		return err
	}
	format := c.String("output")
	if len(items) == 0 && (format == outTable || format == outWide) {
		fmt.Fprintln(r.env.Stderr, noObjects(k, tenant))
		return nil
	}
	return newPrinter(r.env.Stdout, format, k, false, r.env.Now).printList(items, rv)
}

// backupDownload streams the snapshot to a file 0600 (written beside it and
// renamed once whole), checking its length and sha256 against the answer's.
func (r *rezusctl) backupDownload(c *cli.Context) error {
	if c.NArg() != 1 {
		return errors.New("give the backup: rezusctl backup download -t TENANT NAME")
	}
	cl, tenant, err := r.backupTenant(c)
	if err != nil {
		return err
	}
	name := c.Args().First()
	resp, err := cl.do(c.Context, request{method: http.MethodGet, path: "/api/v1/tenants/" + tenant + "/etcdbackups/" + name + "/snapshot",
		header: http.Header{"Accept": {"application/octet-stream"}}})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	out := c.String("output")
	var w io.Writer
	var tmp *os.File
	if out == "-" {
		w = r.env.Stdout
	} else {
		if out == "" {
			out = tenant + "-" + name + ".snapshot"
		}
		tmp, err = os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
		if err != nil {
			return err
		}
		defer os.Remove(tmp.Name())
		defer tmp.Close()
		if err := tmp.Chmod(0o600); err != nil {
			return err
		}
		w = tmp
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), resp.Body)
	if err != nil {
		return fmt.Errorf("downloading the snapshot of %s: %w (the file was not written)", name, err)
	}
	if want, perr := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64); perr == nil && want != n {
		return fmt.Errorf("the snapshot of %s ended after %d of %d bytes (the file was not written)", name, n, want)
	}
	if want := resp.Header.Get("X-Snapshot-Sha256"); want != "" && want != hex.EncodeToString(h.Sum(nil)) {
		return fmt.Errorf("the snapshot of %s does not match its sha256 (the file was not written)", name)
	}
	if tmp == nil {
		return nil
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return err
	}
	fmt.Fprintf(r.env.Stdout, "wrote the snapshot of %s/%s (%s) to %s\n", tenant, name, humanBytes(n), out)
	return nil
}

func toInt(v any) int64 {
	f, _ := v.(float64)
	return int64(f)
}

// dash shows a missing status field as "-".
func dash(v any) string {
	if v == nil || v == "" {
		return "-"
	}
	return fmt.Sprint(v)
}
