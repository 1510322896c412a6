package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// describeUpgradeMachines is describe's section of an upgrade's machines:
// each one's step, the replica that ran it and, for a step that waits, what it waits for as of now,
// since when and until when its deadline runs (absolute and relative), so a
// slow step can be told from a dead one.
func describeUpgradeMachines(w io.Writer, o *domain.Object, now time.Time) {
	fmt.Fprintln(w, "Machines:")
	var st domain.UpgradeStatus
	if json.Unmarshal(o.Status, &st) != nil || len(st.Machines) == 0 {
		fmt.Fprintln(w, "  <none>")
		return
	}

	rows := [][]string{{"NAME", "ROLE", "FROM", "TO", "PHASE", "REPLICA", "MESSAGE"}}
	var waiting []domain.UpgradeMachine
	for _, m := range st.Machines {
		msg := m.Message
		switch {
		case m.Final() && m.Error != "":
			msg = m.Error
		case m.Final():
			msg = ""
		case m.Wait != nil:
			msg = m.Wait.Message(now)
			waiting = append(waiting, m)
		}
		rows = append(rows, []string{m.Name, m.Role, orNone(m.From), m.To, m.Phase, orNone(m.Replica), orNone(msg)})
	}
	indentTable(w, rows)

	for _, m := range waiting {
		fmt.Fprintf(w, "  %s waits for %s\n", m.Name, m.Wait.For)
		if m.Wait.LastError != "" {
			checked := ""
			if m.Wait.Checked != nil {
				checked = fmt.Sprintf(" (checked %s)", relativeTo(*m.Wait.Checked, now))
			}
			fmt.Fprintf(w, "    Last answer: %s%s\n", m.Wait.LastError, checked)
		}
		fmt.Fprintf(w, "    Since:       %s (%s)\n", m.Wait.Since.UTC().Format(time.RFC3339), relativeTo(m.Wait.Since, now))
		fmt.Fprintf(w, "    Deadline:    %s (%s)\n", m.Wait.Deadline.UTC().Format(time.RFC3339), relativeTo(m.Wait.Deadline, now))
	}
}

// relativeTo says when t is from now: "4m10s ago", "in 5m50s".
func relativeTo(t, now time.Time) string {
	if t.After(now) {
		return "in " + domain.ShortDuration(t.Sub(now))
	}
	return domain.ShortDuration(now.Sub(t)) + " ago"
}
