package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/domain"
)

// rolloutCommand creates and steers Rollouts: one change rolled across the
// tenants a selector picks, in waves with a soak after each.
func (r *rezusctl) rolloutCommand() *cli.Command {
	nameArg := func(c *cli.Context) (string, error) {
		if c.NArg() != 1 {
			return "", fmt.Errorf("give the rollout's name: rezusctl rollout %s NAME", c.Command.Name)
		}
		return c.Args().First(), nil
	}
	return &cli.Command{
		Name:  "rollout",
		Usage: "roll one change (a Talos or Kubernetes version, a config patch, a rotation) across many tenants in waves",
		Description: "A rollout changes the tenants its selector picks wave after wave: the first wave's tenants,\n" +
			"then a soak during which they must stay healthy, then the next wave. Each tenant gets its own\n" +
			"Upgrade (or the ConfigPatch), so its maintenance windows, drains and checks hold. A tenant that\n" +
			"fails, or turns unhealthy during its wave, halts the rollout; resume starts it again and goes on.\n\n" +
			"  rezusctl rollout create talos-1-13-1 --talos-version v1.13.1 --selector env=prod --waves 1,25%,100% --soak 30m\n" +
			"  rezusctl rollout create ntp --patch-file ntp.yaml --patch-name ntp\n" +
			"  rezusctl rollout create new-cas --rotate kubernetes-ca --rotate talos-ca --waves 1,50%,100%\n" +
			"  rezusctl rollout get\n  rezusctl rollout describe talos-1-13-1\n" +
			"  rezusctl rollout pause talos-1-13-1\n  rezusctl rollout resume talos-1-13-1\n  rezusctl rollout abort talos-1-13-1",
		Subcommands: []*cli.Command{
			{
				Name: "create", Usage: "create a rollout", ArgsUsage: "NAME",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "talos-version", Usage: "upgrade every selected tenant to this Talos `VERSION`"},
					&cli.StringFlag{Name: "kubernetes-version", Usage: "upgrade every selected tenant to this Kubernetes `VERSION`"},
					&cli.StringFlag{Name: "patch-file", Usage: "add (or update) this config patch `FILE` on every selected tenant (a strategic merge patch)"},
					&cli.StringFlag{Name: "patch-name", Usage: "the `NAME` of the config patch on each tenant (default: the rollout's)"},
					&cli.StringSliceFlag{Name: "rotate", Usage: "rotate this `SECRET` of every selected tenant (repeatable, as rezusctl rotate's flags: kubernetes-ca, talos-ca, aggregator-ca, bootstrap-token or all)"},
					&cli.StringFlag{Name: "selector", Aliases: []string{"l"}, Usage: "label `SELECTOR` of the tenants (default: every tenant)"},
					&cli.StringFlag{Name: "waves", Value: "1,100%", Usage: "the waves: tenant counts or percentages of all the rollout's tenants reached so far, ending at 100%"},
					&cli.IntFlag{Name: "max-parallel", Usage: "tenants of a wave changed at once (default: the whole wave)"},
					&cli.DurationFlag{Name: "soak", Value: 10 * time.Minute, Usage: "how long each wave's tenants must stay healthy before the next wave"},
					&cli.DurationFlag{Name: "progress-deadline", Usage: "how long a wave may go without a tenant finishing its change before the rollout halts (default 6h)"},
				},
				Action: func(c *cli.Context) error {
					name, err := nameArg(c)
					if err != nil {
						return err
					}
					spec, err := rolloutSpecOf(c, name)
					if err != nil {
						return err
					}
					specRaw, _ := json.Marshal(spec)
					body, _ := json.Marshal(domain.Object{APIVersion: domain.APIVersion, Kind: domain.RolloutKind.Kind,
						Metadata: domain.ObjectMeta{Name: name}, Spec: specRaw})
					_, cl, err := r.connect(c)
					if err != nil {
						return err
					}
					k, _ := resolveKind("rollouts")
					if err := cl.call(c.Context, request{method: http.MethodPost, path: k.collectionPath(""), body: body}, &domain.Object{}); err != nil {
						return err
					}
					fmt.Fprintf(r.env.Stdout, "rollout/%s created: %s\n", name, spec.Change.Description())
					return nil
				},
			},
			{
				Name: "get", Usage: "list the rollouts, or show one", ArgsUsage: "[NAME]",
				Action: func(c *cli.Context) error {
					_, cl, err := r.connect(c)
					if err != nil {
						return err
					}
					k, _ := resolveKind("rollouts")
					var ros []domain.Rollout
					if c.NArg() == 1 {
						var ro domain.Rollout
						if err := cl.call(c.Context, request{method: http.MethodGet, path: k.itemPath("", c.Args().First())}, &ro); err != nil {
							return err
						}
						ros = append(ros, ro)
					} else {
						var l struct{ Items []domain.Rollout }
						if err := cl.call(c.Context, request{method: http.MethodGet, path: k.collectionPath("")}, &l); err != nil {
							return err
						}
						ros = l.Items
					}
					writeRolloutTable(r.env.Stdout, ros)
					return nil
				},
			},
			{
				Name: "describe", Usage: "show a rollout wave by wave, with its tenants", ArgsUsage: "NAME",
				Action: func(c *cli.Context) error {
					name, err := nameArg(c)
					if err != nil {
						return err
					}
					_, cl, err := r.connect(c)
					if err != nil {
						return err
					}
					k, _ := resolveKind("rollouts")
					var ro domain.Rollout
					if err := cl.call(c.Context, request{method: http.MethodGet, path: k.itemPath("", name)}, &ro); err != nil {
						return err
					}
					describeRollout(r.env.Stdout, &ro, time.Now())
					return nil
				},
			},
			r.rolloutVerb("pause", "stop starting tenants (the changes under way go on)", func(*domain.Rollout) (map[string]any, error) {
				return map[string]any{"paused": true}, nil
			}),
			r.rolloutVerb("resume", "go on after a pause or a halt (a failed tenant starts again)", func(ro *domain.Rollout) (map[string]any, error) {
				patch := map[string]any{"paused": false}
				if h := ro.Status.Halt; h != nil {
					patch["resumeHalt"] = h.Number
				}
				return patch, nil
			}),
			r.rolloutVerb("abort", "end the rollout for good (upgrades under way stop after their current machine)", func(*domain.Rollout) (map[string]any, error) {
				return map[string]any{"abort": true}, nil
			}),
		},
	}
}

// rolloutVerb is a subcommand that merge-patches the rollout's spec with
// what patch answers for its current state, at the resourceVersion read.
// rolloutVerbAttempts bounds how often a pause, resume or abort is read and
// decided again after a conflict with the rollout controller's writes.
const rolloutVerbAttempts = 5

func (r *rezusctl) rolloutVerb(name, usage string, patch func(*domain.Rollout) (map[string]any, error)) *cli.Command {
	return &cli.Command{
		Name: name, Usage: usage, ArgsUsage: "NAME",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return fmt.Errorf("give the rollout's name: rezusctl rollout %s NAME", name)
			}
			_, cl, err := r.connect(c)
			if err != nil {
				return err
			}
			k, _ := resolveKind("rollouts")
			path := k.itemPath("", c.Args().First())
			// The patch is made on what was read (its resourceVersion): the
			// rollout controller writes the status while the rollout runs, so
			// a conflict is read again and decided again, as kubectl's
			// RetryOnConflict does.
			for attempt := 1; ; attempt++ {
				var ro domain.Rollout
				if err := cl.call(c.Context, request{method: http.MethodGet, path: path}, &ro); err != nil {
					return err
				}
				if ro.Status.Finished() {
					return fmt.Errorf("rollout %s is %s: it cannot be changed any more", ro.Metadata.Name, ro.Status.Phase)
				}
				spec, err := patch(&ro)
				if err != nil {
					return err
				}
				body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": ro.Metadata.ResourceVersion}, "spec": spec})
				err = cl.call(c.Context, request{method: http.MethodPatch, path: path, body: body, contentType: "application/merge-patch+json"}, &ro)
				if isConflict(err) && attempt < rolloutVerbAttempts {
					continue
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(r.env.Stdout, "rollout/%s: %s requested\n", ro.Metadata.Name, name)
				return nil
			}
		},
	}
}

// rolloutSpecOf reads create's flags.
func rolloutSpecOf(c *cli.Context, name string) (domain.RolloutSpec, error) {
	var spec domain.RolloutSpec
	set := 0
	if v := c.String("talos-version"); v != "" {
		spec.Change.TalosVersion, set = v, set+1
	}
	if v := c.String("kubernetes-version"); v != "" {
		spec.Change.KubernetesVersion, set = v, set+1
	}
	if f := c.String("patch-file"); f != "" {
		text, err := os.ReadFile(f)
		if err != nil {
			return spec, err
		}
		pn := c.String("patch-name")
		if pn == "" {
			pn = name
		}
		spec.Change.ConfigPatch, set = &domain.RolloutConfigPatch{Name: pn, Spec: domain.ConfigPatchSpec{Patch: string(text)}}, set+1
	}
	if v := c.StringSlice("rotate"); len(v) > 0 {
		spec.Change.Rotate, set = v, set+1 // the server checks them: its 422 names the secret
	}
	if set != 1 {
		return spec, errors.New("give one change: --talos-version, --kubernetes-version, --patch-file or --rotate")
	}
	spec.TenantSelector = c.String("selector")
	waves, err := domain.ParseWaves(c.String("waves"), c.Int("max-parallel"))
	if err != nil {
		return spec, err
	}
	spec.Waves = waves
	spec.Soak = c.Duration("soak").String()
	if d := c.Duration("progress-deadline"); d > 0 {
		spec.ProgressDeadline = d.String()
	}
	return spec, nil
}

func writeRolloutTable(w io.Writer, ros []domain.Rollout) {
	rows := [][]string{{"NAME", "CHANGE", "PHASE", "WAVE", "DONE", "FAILED", "MESSAGE"}}
	for _, ro := range ros {
		st := &ro.Status
		wave := "-"
		if n := len(st.Waves); n > 0 {
			wave = fmt.Sprintf("%d/%d", min(st.CurrentWave()+1, n), n)
		}
		rows = append(rows, []string{ro.Metadata.Name, ro.Spec.Change.Description(), st.Phase, wave,
			fmt.Sprintf("%d/%d", st.Counts.Done, st.Counts.Total), strconv.Itoa(st.Counts.Failed), st.Message})
	}
	_ = (&table{w: w}).write(rows)
}

// describeRollout prints the rollout, then each wave with its tenants: every
// tenant not done by name (at most 20 a wave), the done ones counted.
func describeRollout(w io.Writer, ro *domain.Rollout, now time.Time) {
	st := &ro.Status
	fmt.Fprintf(w, "Name:        %s\nChange:      %s\nSelector:    %s\nPhase:       %s\nMessage:     %s\n",
		ro.Metadata.Name, ro.Spec.Change.Description(), orNone(ro.Spec.TenantSelector), st.Phase, st.Message)
	deadline := ro.Spec.ProgressDeadline
	if deadline == "" {
		deadline = domain.ShortDuration(domain.DefaultRolloutProgressDeadline) + " (default)"
	}
	fmt.Fprintf(w, "Soak:        %s\nDeadline:    %s without a tenant finishing halts the rollout\nTenants:     %d (%d done, %d running, %d waiting, %d failed, %d skipped)\n",
		ro.Spec.Soak, deadline, st.Counts.Total, st.Counts.Done, st.Counts.Running, st.Counts.Waiting, st.Counts.Failed, st.Counts.Skipped)
	if h := st.Halt; h != nil {
		state := "halted"
		if h.Resumed {
			state = "resumed"
		}
		fmt.Fprintf(w, "Halt %d:      %s at tenant %s, %s ago: %s\n", h.Number, state, h.Tenant, humanDuration(now.Sub(h.At)), h.Reason)
	}
	for i, wave := range st.Waves {
		extra := ""
		if wave.State == domain.RolloutWaveSoaking && wave.SoakUntil != nil {
			extra = fmt.Sprintf(", soaking for %s more", humanDuration(wave.SoakUntil.Sub(now)))
		}
		fmt.Fprintf(w, "Wave %d:      %s, %d tenants%s\n", i+1, wave.State, wave.Size, extra)
		if msg := wave.WaitMessage(now); msg != "" {
			fmt.Fprintf(w, "  %s\n", msg)
		}
		done, shown := 0, 0
		for _, t := range st.Tenants {
			if t.Wave != i {
				continue
			}
			if t.State == domain.RolloutTenantDone {
				done++
				continue
			}
			if shown++; shown <= 20 {
				fmt.Fprintf(w, "  %-24s %-8s %s\n", t.Name, t.State, t.Message)
			}
		}
		if shown > 20 {
			fmt.Fprintf(w, "  … and %d more not done\n", shown-20)
		}
		if done > 0 {
			fmt.Fprintf(w, "  %d done\n", done)
		}
	}
}

// rolloutChangeCell is the CHANGE column of rollouts.
func rolloutChangeCell(o *domain.Object, _ time.Time) string {
	var spec domain.RolloutSpec
	if json.Unmarshal(o.Spec, &spec) != nil {
		return ""
	}
	return spec.Change.Description()
}

// rolloutDoneCell is the DONE column of rollouts: tenants done of all.
func rolloutDoneCell(o *domain.Object, _ time.Time) string {
	var st domain.RolloutStatus
	if json.Unmarshal(o.Status, &st) != nil || st.Counts.Total == 0 {
		return ""
	}
	return fmt.Sprintf("%d/%d", st.Counts.Done, st.Counts.Total)
}
