package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// machineConfigCell is the CONFIG column of machines: up to date, pending, or
// failed with the ConfigApplied condition's reason.
func machineConfigCell(o *domain.Object, _ time.Time) string {
	var st domain.MachineStatus
	if len(o.Status) == 0 || json.Unmarshal(o.Status, &st) != nil {
		return ""
	}
	state, c := st.ConfigState()
	if state == domain.ConfigStateFailed && c.Reason != "" {
		return state + " (" + c.Reason + ")"
	}
	return state
}

// configHistoryRows is how many of a machine's config changes describe shows.
const configHistoryRows = 10

// configShortHash is how much of a config hash the history shows.
const configShortHash = 12

// configHistory is a machine's config history read from its events.
type configHistory struct{ h *domain.ConfigHistory }

func newConfigHistory() *configHistory { return &configHistory{h: domain.NewConfigHistory()} }

// add reads one event of the machine.
func (h *configHistory) add(r record) {
	var obj domain.Object
	if json.Unmarshal(r.f["object"], &obj) != nil {
		return
	}
	at, _ := time.Parse(time.RFC3339Nano, r.first("time", "timestamp"))
	h.h.Add(r.str("type"), r.str("actor"), at, &obj)
}

func shortHash(h string) string {
	if len(h) > configShortHash {
		return h[:configShortHash]
	}
	return h
}

// describeConfigHistory writes the Config History section of a machine.
func describeConfigHistory(w io.Writer, h *configHistory, err error) {
	fmt.Fprint(w, "Config History:")
	changes := h.h.Changes()
	switch {
	case err != nil && (httpCode(err) == http.StatusNotFound || httpCode(err) == http.StatusMethodNotAllowed):
		fmt.Fprintln(w, " not available")
		return
	case err != nil:
		fmt.Fprintf(w, " not available (%v)\n", err)
		return
	case len(changes) == 0:
		fmt.Fprintln(w, " <none>")
		return
	}
	fmt.Fprintln(w)
	rows := [][]string{{"TIME", "ACTOR", "HASH", "RESULT", "MESSAGE"}}
	for _, c := range changes[max(0, len(changes)-configHistoryRows):] {
		at, result := "", c.Reason
		if !c.Time.IsZero() {
			at = c.Time.UTC().Format(time.RFC3339)
		}
		if c.Awaiting {
			result = "<pending>"
		}
		rows = append(rows, []string{orNone(at), orNone(c.Actor), orDash(shortHash(c.Hash)), orNone(result), orNone(c.Message)})
	}
	indentTable(w, rows)
}
