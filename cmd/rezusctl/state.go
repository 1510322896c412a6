package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"
)

// stateVersion is one kept version of a tenant's terraform state, as GET
// …/state/versions answers (eventstore.StateVersion, read without importing
// the server's packages).
type stateVersion struct {
	Revision  uint64    `json:"revision"`
	Serial    uint64    `json:"serial"`
	Lineage   string    `json:"lineage"`
	Size      int64     `json:"size"`
	Encrypted bool      `json:"encrypted"`
	Time      time.Time `json:"time"`
	Deleted   bool      `json:"deleted"`
}

// stateLock is a held lock: the apply holding it and tofu's LockInfo.
type stateLock struct {
	ApplyID string `json:"applyID"`
	Info    struct {
		ID        string    `json:"ID"`
		Operation string    `json:"Operation"`
		Who       string    `json:"Who"`
		Created   time.Time `json:"Created"`
	} `json:"info"`
}

func (l stateLock) String() string {
	s := fmt.Sprintf("lock %s", l.Info.ID)
	if l.ApplyID != "" {
		s += " of apply " + l.ApplyID
	}
	if l.Info.Operation != "" || l.Info.Who != "" {
		s += fmt.Sprintf(" (%s by %s)", orNone(l.Info.Operation), orNone(l.Info.Who))
	}
	if !l.Info.Created.IsZero() {
		s += " since " + l.Info.Created.UTC().Format(time.RFC3339)
	}
	return s
}

// stateCommand reads a tenant's terraform state and its lock over
// /api/v1/tenants/{tenant}/state, …/state/versions and …/state/lock.
func (r *rezusctl) stateCommand() *cli.Command {
	return &cli.Command{
		Name:  "state",
		Usage: "a tenant's terraform state: its kept versions, one version, the lock",
		Subcommands: []*cli.Command{
			{
				Name:        "list",
				Usage:       "list the kept versions of the state, newest first, and who holds the lock",
				Description: "  rezusctl state list -t acme",
				Flags:       []cli.Flag{tenantFlag()},
				Action:      r.stateList,
			},
			{
				Name:  "show",
				Usage: "print the state (the current version, or --revision N); reading it is audited",
				Description: "The state holds the tenant's secrets unless it is encrypted (REZUSCLOUD_STATE_PASSPHRASE).\n\n" +
					"  rezusctl state show -t acme > acme.tfstate\n  rezusctl state show -t acme --revision 12",
				Flags: []cli.Flag{
					tenantFlag(),
					&cli.Uint64Flag{Name: "revision", Usage: "a kept version's REVISION (see state list)"},
				},
				Action: r.stateShow,
			},
			{
				Name:  "unlock",
				Usage: "force-unlock the state, whoever holds it (admins only; audited)",
				Description: "Release a lock left by an apply that died; a running apply whose lock is released may\n" +
					"write over another's state, so cancel a running one instead (rezusctl cancel apply/NAME).\n\n" +
					"  rezusctl state unlock -t acme",
				Flags:  []cli.Flag{tenantFlag()},
				Action: r.stateUnlock,
			},
		},
	}
}

func (r *rezusctl) stateList(c *cli.Context) error {
	s, cl, err := r.connect(c)
	if err != nil {
		return err
	}
	tenant, err := requireTenant(s, c)
	if err != nil {
		return err
	}
	var list struct {
		Items []stateVersion `json:"items"`
		Lock  *stateLock     `json:"lock"`
	}
	if err := cl.call(c.Context, request{method: http.MethodGet, path: "/api/v1/tenants/" + tenant + "/state/versions"}, &list); err != nil {
		return err
	}
	if len(list.Items) == 0 {
		fmt.Fprintf(r.env.Stderr, "tenant %s has no terraform state yet\n", tenant)
	} else {
		rows := [][]string{{"REVISION", "SERIAL", "LINEAGE", "SIZE", "ENCRYPTED", "AGE"}}
		for _, v := range list.Items {
			serial, size, enc := strconv.FormatUint(v.Serial, 10), humanBytes(v.Size), strconv.FormatBool(v.Encrypted)
			if v.Deleted {
				serial, size, enc = "<deleted>", "-", "-"
			}
			age := "<unknown>"
			if !v.Time.IsZero() {
				age = humanDuration(r.env.Now().Sub(v.Time))
			}
			rows = append(rows, []string{strconv.FormatUint(v.Revision, 10), serial, orNone(v.Lineage), size, enc, age})
		}
		if err := (&table{w: r.env.Stdout}).write(rows); err != nil {
			return err
		}
	}
	if list.Lock != nil {
		fmt.Fprintf(r.env.Stdout, "Locked: %s\n", list.Lock)
	} else {
		fmt.Fprintln(r.env.Stdout, "Locked: no")
	}
	return nil
}

func (r *rezusctl) stateShow(c *cli.Context) error {
	s, cl, err := r.connect(c)
	if err != nil {
		return err
	}
	tenant, err := requireTenant(s, c)
	if err != nil {
		return err
	}
	q := url.Values{}
	if c.IsSet("revision") {
		if c.Uint64("revision") == 0 {
			return errors.New("--revision must be a REVISION from state list (1 or more)")
		}
		q.Set("revision", strconv.FormatUint(c.Uint64("revision"), 10))
	}
	var body []byte
	if err := cl.call(c.Context, request{method: http.MethodGet, path: "/api/v1/tenants/" + tenant + "/state", query: q}, &body); err != nil {
		return err
	}
	_, err = r.env.Stdout.Write(body)
	return err
}

func (r *rezusctl) stateUnlock(c *cli.Context) error {
	s, cl, err := r.connect(c)
	if err != nil {
		return err
	}
	tenant, err := requireTenant(s, c)
	if err != nil {
		return err
	}
	var out struct {
		Released stateLock `json:"released"`
	}
	if err := cl.call(c.Context, request{method: http.MethodDelete, path: "/api/v1/tenants/" + tenant + "/state/lock"}, &out); err != nil {
		return err
	}
	fmt.Fprintf(r.env.Stdout, "released the %s on the state of tenant %s\n", out.Released, tenant)
	return nil
}
