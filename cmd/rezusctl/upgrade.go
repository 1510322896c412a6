package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

// upgradeCommand starts a rolling Talos or Kubernetes upgrade of a tenant (an
// Upgrade object the server's upgrade saga carries out) and, with --wait,
// follows it machine by machine until it ends.
//
// It creates the Upgrade rather than changing the tenant's declared version:
// the run can be narrowed (--node-group, --max-parallelism) and named, and
// its name is what --wait follows; a run that Succeeds writes its version
// into the spec it covered, so the declared version follows anyway.
func (r *rezusctl) upgradeCommand() *cli.Command {
	return &cli.Command{
		Name:      "upgrade",
		Usage:     "upgrade a tenant's machines to a Talos or Kubernetes version, one machine at a time",
		ArgsUsage: "TENANT",
		Description: "Creates an upgrade of either Talos (--talos-version: the installer image, machine by machine)\n" +
			"or Kubernetes (--kubernetes-version: new control-plane and kubelet images in each machine's\n" +
			"config, applied in place): control planes first, one at a time, each machine checked healthy\n" +
			"before the next; a machine that fails is rolled back and the upgrade stops. Before a machine\n" +
			"reboots its Node is cordoned and drained (PodDisruptionBudgets honoured, within its node group's\n" +
			"drainTimeout) and uncordoned once it is Ready again; --no-drain skips that. A run that succeeds\n" +
			"writes its version into the tenant's (or node group's) spec. --wait follows it and prints each\n" +
			"machine's progress, and for a step that waits what it waits for, the last answer, how long it has\n" +
			"waited and when it fails (repeated every 10 s on a terminal, 30 s into a file);\n" +
			"the exit code is 0 only when it succeeds. --follow NAME follows an upgrade\n" +
			"that exists (one the server started when the tenant's declared version changed).\n\n" +
			"  rezusctl upgrade acme --talos-version v1.13.1 --wait\n" +
			"  rezusctl upgrade acme --kubernetes-version v1.36.1 --wait\n" +
			"  rezusctl upgrade acme --talos-version v1.13.1 --node-group workers --max-parallelism 3\n" +
			"  rezusctl upgrade acme --follow talos-v1-13-1-4711",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "talos-version", Usage: "the target Talos `VERSION`, e.g. v1.13.1"},
			&cli.StringFlag{Name: "kubernetes-version", Usage: "the target Kubernetes `VERSION`, e.g. v1.36.1"},
			&cli.StringSliceFlag{Name: "node-group", Usage: "upgrade only this node group (repeatable; default: every machine)"},
			&cli.IntFlag{Name: "max-parallelism", Usage: "workers upgraded at once (control planes always go one at a time)", Value: 1},
			&cli.StringFlag{Name: "name", Usage: "`NAME` of the upgrade (default: generated)"},
			&cli.BoolFlag{Name: "no-drain", Usage: "do not cordon and drain each machine's Node before it reboots (by default every machine is drained, PodDisruptionBudgets honoured, unless its node group says drain: false)"},
			&cli.BoolFlag{Name: "now", Usage: "start machines outside the tenant's maintenance windows (spec.maintenance); recorded with the upgrade in the audit log"},
			&cli.StringFlag{Name: "precheck-deadline", Usage: "how long a machine may take to answer before it is touched (and, for a control plane, etcd to keep quorum without it): a `DURATION`, 10s-24h (default: the server's, 5m)"},
			&cli.StringFlag{Name: "reboot-deadline", Usage: "how long a machine may take to come back on the target, or on its old version in a rollback: a `DURATION`, 10s-24h (default: the server's, 20m)"},
			&cli.StringFlag{Name: "verify-deadline", Usage: "how long a machine back on the target may take to be healthy (for Kubernetes, its API server and kubelet to answer the target) before it is rolled back: a `DURATION`, 10s-24h (default: the server's, 10m)"},
			&cli.BoolFlag{Name: "wait", Aliases: []string{"w"}, Usage: "follow the upgrade until it ends"},
			&cli.StringFlag{Name: "follow", Usage: "follow the existing upgrade `NAME` instead of creating one"},
			&cli.DurationFlag{Name: "timeout", Usage: "give up waiting after this long (0: no limit)"},
		},
		Action: r.upgrade,
	}
}

func (r *rezusctl) upgrade(c *cli.Context) error {
	if c.NArg() != 1 {
		return errors.New("give the tenant: rezusctl upgrade TENANT --talos-version vX.Y.Z (or --kubernetes-version vX.Y.Z)")
	}
	tenant := c.Args().First()
	follow := c.String("follow")
	target, err := upgradeTargetOf(c.String("talos-version"), c.String("kubernetes-version"), follow != "")
	if err != nil {
		return err
	}
	_, cl, err := r.connect(c)
	if err != nil {
		return err
	}
	k, err := resolveKind("upgrades")
	if err != nil {
		return err
	}
	ctx := c.Context
	if d := c.Duration("timeout"); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	var u *domain.Object
	if follow != "" {
		if u, err = cl.getObject(ctx, k, tenant, follow); err != nil {
			return err
		}
	} else {
		if u, err = r.createUpgrade(ctx, c, cl, k, tenant, target); err != nil {
			return err
		}
		fmt.Fprintf(r.env.Stdout, "upgrade/%s created: tenant %q to %s\n", u.Metadata.Name, tenant, target)
		if !c.Bool("wait") {
			return nil
		}
	}
	err = r.followUpgrade(ctx, cl, k, tenant, u)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && c.Context.Err() == nil {
		return fmt.Errorf("timed out after %s; the upgrade goes on (rezusctl upgrade %s --follow %s)", c.Duration("timeout"), tenant, u.Metadata.Name)
	}
	return err
}

// upgradeTarget is what an upgrade moves: Talos or Kubernetes, to a version.
type upgradeTarget struct {
	kubernetes bool
	version    string
}

// String is how messages name the target: "v1.13.1" for Talos (the
// upgrade's first and usual kind), "Kubernetes v1.36.1".
func (t upgradeTarget) String() string {
	if t.kubernetes {
		return "Kubernetes " + t.version
	}
	return t.version
}

// upgradeTargetOf checks the version flags: exactly one of them, or none
// with --follow.
func upgradeTargetOf(talos, kubernetes string, following bool) (upgradeTarget, error) {
	switch {
	case following && (talos != "" || kubernetes != ""):
		return upgradeTarget{}, errors.New("--follow follows an existing upgrade; it does not go with --talos-version or --kubernetes-version")
	case following:
		return upgradeTarget{}, nil
	case talos != "" && kubernetes != "":
		return upgradeTarget{}, errors.New("an upgrade moves either Talos or Kubernetes: give --talos-version or --kubernetes-version, not both " +
			"(run two upgrades; they run one after the other)")
	case talos == "" && kubernetes == "":
		return upgradeTarget{}, errors.New("give the target with --talos-version vX.Y.Z or --kubernetes-version vX.Y.Z (or --follow NAME to follow an upgrade)")
	case kubernetes != "":
		return upgradeTarget{kubernetes: true, version: kubernetes}, nil
	}
	return upgradeTarget{version: talos}, nil
}

func (r *rezusctl) createUpgrade(ctx context.Context, c *cli.Context, cl *client, k kind, tenant string, target upgradeTarget) (*domain.Object, error) {
	name := c.String("name")
	if name == "" {
		name = generatedUpgradeName(target)
	}
	spec := domain.UpgradeSpec{NodeGroups: c.StringSlice("node-group"), MaxParallelism: c.Int("max-parallelism"), NoDrain: c.Bool("no-drain"), Now: c.Bool("now")}
	if d := (domain.UpgradeDeadlines{Precheck: c.String("precheck-deadline"), Reboot: c.String("reboot-deadline"), Verify: c.String("verify-deadline")}); d != (domain.UpgradeDeadlines{}) {
		spec.Deadlines = &d // the server checks them: its 422 names the field
	}
	if target.kubernetes {
		spec.KubernetesVersion = target.version
	} else {
		spec.TalosVersion = target.version
	}
	return postUpgrade(ctx, cl, k, tenant, name, spec)
}

// postUpgrade creates the Upgrade name of tenant with spec; the server
// checks the spec, and its 422 names the field at fault.
func postUpgrade(ctx context.Context, cl *client, k kind, tenant, name string, spec domain.UpgradeSpec) (*domain.Object, error) {
	specRaw, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(domain.Object{APIVersion: domain.APIVersion, Kind: domain.UpgradeKind.Kind,
		Metadata: domain.ObjectMeta{Name: name}, Spec: specRaw})
	if err != nil {
		return nil, err
	}
	u := &domain.Object{}
	if err := cl.call(ctx, request{method: http.MethodPost, path: k.collectionPath(tenant), body: body}, u); err != nil {
		return nil, err
	}
	return u, nil
}

// generatedUpgradeName is "talos-<version>-<5 hex>" (or "kubernetes-..."), a DNS label.
func generatedUpgradeName(target upgradeTarget) string {
	prefix := "talos-"
	if target.kubernetes {
		prefix = "kubernetes-"
	}
	return generatedName(prefix, target.version)
}

// generatedName is prefix, then what in lower-case letters and digits (the
// rest as dashes, at most 40), then 5 random hex digits: a DNS label.
func generatedName(prefix, what string) string {
	var b strings.Builder
	for _, ch := range strings.ToLower(what) {
		if (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') {
			b.WriteRune(ch)
		} else {
			b.WriteByte('-')
		}
	}
	v := strings.Trim(b.String(), "-")
	if len(v) > 40 {
		v = strings.Trim(v[:40], "-")
	}
	rnd := make([]byte, 3)
	_, _ = rand.Read(rnd)
	return prefix + v + "-" + hex.EncodeToString(rnd)[:5]
}

// errUpgradeEnded stops the watch once the upgrade has ended.
var errUpgradeEnded = errors.New("ended")

// followUpgrade prints the upgrade's progress from the version u was read
// at: a line per machine whenever its step moves, the step's wait again as
// its time goes by (the server writes a wait once, not every second), and
// how the run ends. It fails unless the run Succeeded.
func (r *rezusctl) followUpgrade(ctx context.Context, cl *client, k kind, tenant string, u *domain.Object) error {
	p := newUpgradeProgress(r.env.Stdout, r.env.Stderr, r.env.Now, r.env.StdoutIsTerminal())
	if done, err := p.show(u); done || err != nil {
		return err
	}

	// The elapsed time of a wait moves on without events: a ticker repeats
	// its line, and is gone before this returns.
	tickCtx, stopTicking := context.WithCancel(ctx)
	ticking := make(chan struct{})
	go func() {
		defer close(ticking)
		t := time.NewTicker(upgradeWaitTick)
		defer t.Stop()
		for {
			select {
			case <-tickCtx.Done():
				return
			case <-t.C:
				p.refresh()
			}
		}
	}()
	defer func() {
		stopTicking()
		<-ticking
	}()

	err := r.stream(ctx, cl, k.collectionPath(tenant), url.Values{"watch": {"true"}}, "resourceVersion", u.Metadata.ResourceVersion, func(ev sseEvent) error {
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
		o := &domain.Object{}
		if err := json.Unmarshal(we.Object, o); err != nil || o.Metadata.Name != u.Metadata.Name {
			return nil
		}
		if we.Type == "DELETED" {
			return fmt.Errorf("upgrade %s was deleted", u.Metadata.Name)
		}
		done, err := p.show(o)
		if done && err == nil {
			return errUpgradeEnded
		}
		if err != nil {
			return err
		}
		return nil
	})
	switch {
	case errors.Is(err, errUpgradeEnded):
		return nil
	case err != nil:
		return err
	}
	return ctx.Err()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// upgradeDone is the DONE column of upgrades: machines done of the plan's.
func upgradeDone(o *domain.Object, _ time.Time) string {
	var st domain.UpgradeStatus
	if json.Unmarshal(o.Status, &st) != nil || len(st.Machines) == 0 {
		return ""
	}
	done := 0
	for _, m := range st.Machines {
		if m.Phase == domain.StepDone {
			done++
		}
	}
	return fmt.Sprintf("%d/%d", done, len(st.Machines))
}
