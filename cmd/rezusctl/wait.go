package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// statusWait is the wait an object's status records at its top level
// (status.wait of a Restore, status.configWait of a Machine), nil when it
// waits for nothing.
func statusWait(status json.RawMessage) *domain.StepWait {
	var st struct {
		Wait       *domain.StepWait `json:"wait"`
		ConfigWait *domain.StepWait `json:"configWait"`
	}
	if len(status) == 0 || json.Unmarshal(status, &st) != nil {
		return nil
	}
	if st.Wait != nil {
		return st.Wait
	}
	return st.ConfigWait
}

// describeWait writes the Waiting line of an object whose status records a
// wait: what for, the last answer, for how long and until when.
func describeWait(w io.Writer, status json.RawMessage, now time.Time) {
	if sw := statusWait(status); sw != nil {
		fmt.Fprintf(w, "%-18s %s\n", "Waiting:", sw.Message(now))
	}
}
