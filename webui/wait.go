package webui

import (
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// waitParts is a wait's Message cut where static/live.js moves it on:
// "waiting for X: last error", ", ", "4m10s", " ", "(fails in 5m50s)".
type waitParts struct {
	words, elapsed, left string
}

// waitPartsOf cuts the wait's Message as of its last record (its last
// check, else its start), not as of the server's now: a rendering that
// changed every second would send the live fragment again at every
// LiveRefresh, replacing the DOM under the reader's cursor.
func waitPartsOf(w *domain.StepWait) waitParts {
	at := w.Since
	if w.Checked != nil && w.Checked.After(at) {
		at = *w.Checked
	}
	m := w.Message(at)
	comma := strings.LastIndex(m, ", ")
	paren := strings.LastIndex(m, " (")
	if comma < 0 || paren < comma {
		return waitParts{words: m} // not Message's shape: shown as it is
	}
	return waitParts{words: m[:comma], elapsed: m[comma+2 : paren], left: m[paren+1:]}
}

// waitTime is an instant as static/live.js parses it (Date.parse), to the
// millisecond.
func waitTime(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}
