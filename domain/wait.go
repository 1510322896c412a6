package domain

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// StepWait is what a saga step waits for: in words, since when, until
// when (past Deadline the step fails), and the last answer that kept it
// waiting. A saga records it when the wait begins and again when that
// answer changes (WaitChanged), so that a reader can tell a slow step from
// a dead one, and a saga that resumes after a restart keeps the deadline
// instead of starting it afresh (ResumeWait). Readers render it with
// Message, which counts the time from Since to their own now.
type StepWait struct {
	// For says what the step waits for, e.g. "kube-apiserver on cp-1 to
	// answer v1.35.5".
	For string `json:"for"`
	// Since is when the wait began.
	Since time.Time `json:"since"`
	// Deadline is when the step fails if it still waits.
	Deadline time.Time `json:"deadline"`
	// LastError is the last answer that kept it waiting, e.g. "connection
	// refused" ("" before the first check).
	LastError string `json:"lastError,omitempty"`
	// Checked is when LastError was recorded.
	Checked *time.Time `json:"checked,omitempty"`
}

// Bounds of a wait's words and of the deadlines a user may set.
const (
	MaxWaitForBytes   = 512
	MaxWaitErrorBytes = 1 << 10
	// MinStepDeadline and MaxStepDeadline bound a step deadline set on a
	// resource (Upgrade spec.deadlines).
	MinStepDeadline = 10 * time.Second
	MaxStepDeadline = 24 * time.Hour
	// WaitRecordEvery is how often, at most, a wait whose last error keeps
	// changing is recorded again: a flapping answer must not write an
	// event every poll.
	WaitRecordEvery = 15 * time.Second
)

// BeginWait is the wait for what, begun at now with timeout; a wait
// recorded before for the same thing (a step resumed after a restart)
// keeps its start and deadline: kill -9 does not buy a step more time.
func BeginWait(prev *StepWait, what string, now time.Time, timeout time.Duration) StepWait {
	what = clipText(what, MaxWaitForBytes)
	if prev != nil && prev.For == what && !prev.Deadline.IsZero() {
		return *prev
	}
	return StepWait{For: what, Since: now.UTC(), Deadline: now.UTC().Add(timeout)}
}

// Observe sets the answer of a check made at now.
func (w *StepWait) Observe(lastErr string, now time.Time) {
	t := now.UTC()
	w.LastError, w.Checked = clipText(lastErr, MaxWaitErrorBytes), &t
}

// Expired reports whether the deadline has passed at now.
func (w *StepWait) Expired(now time.Time) bool { return !now.Before(w.Deadline) }

// WaitChanged reports whether next is worth recording over prev (what was
// recorded last): a new wait, or another last error once WaitRecordEvery
// has passed since the last record.
func WaitChanged(prev *StepWait, next StepWait) bool {
	switch {
	case prev == nil || prev.For != next.For || !prev.Since.Equal(next.Since) || !prev.Deadline.Equal(next.Deadline):
		return true
	case prev.LastError == next.LastError:
		return false
	case prev.Checked == nil || next.Checked == nil:
		return true
	}
	return next.Checked.Sub(*prev.Checked) >= WaitRecordEvery
}

// Message renders the wait as of now: "waiting for kube-apiserver on cp-1
// to answer v1.35.5: connection refused, 4m10s (fails in 5m50s)".
func (w *StepWait) Message(now time.Time) string {
	if w == nil || w.For == "" {
		return ""
	}
	var b strings.Builder
	b.WriteString("waiting for ")
	b.WriteString(w.For)
	if w.LastError != "" {
		b.WriteString(": ")
		b.WriteString(w.LastError)
	}
	fmt.Fprintf(&b, ", %s", ShortDuration(now.Sub(w.Since)))
	if left := w.Deadline.Sub(now); left > 0 {
		fmt.Fprintf(&b, " (fails in %s)", ShortDuration(left))
	} else {
		b.WriteString(" (past its deadline)")
	}
	return b.String()
}

// DeadlineProblem is a step's error when its wait passed the deadline:
// what it waited for, for how long, and the last answer.
func (w *StepWait) DeadlineProblem(step string) string {
	p := fmt.Sprintf("%s passed its deadline of %s waiting for %s", step, ShortDuration(w.Deadline.Sub(w.Since)), w.For)
	if w.LastError != "" {
		p += "; last answer: " + w.LastError
	}
	return p
}

// Validate checks a recorded wait's bounds at f.
func (w *StepWait) Validate(f *field.Path) []Cause {
	var causes []Cause
	if len(w.For) > MaxWaitForBytes {
		causes = append(causes, Cause{Field: f.Child("for").String(), Type: CauseTooLong, Message: fmt.Sprintf("must be no more than %d bytes", MaxWaitForBytes)})
	}
	if len(w.LastError) > MaxWaitErrorBytes {
		causes = append(causes, Cause{Field: f.Child("lastError").String(), Type: CauseTooLong, Message: fmt.Sprintf("must be no more than %d bytes", MaxWaitErrorBytes)})
	}
	if !w.Deadline.IsZero() && w.Deadline.Before(w.Since) {
		causes = append(causes, Cause{Field: f.Child("deadline").String(), Type: CauseInvalid, Message: "must not be before since"})
	}
	return causes
}

// ShortDuration renders d to the second, without zero units: 4m10s, 2h0m5s, 45s.
func ShortDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	if d > 0 && d < time.Second {
		return d.String() // a test's deadline, not a person's
	}
	d = d.Round(time.Second)
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// ValidateStepDeadline checks a user's deadline override at f: "" or a
// Go duration between MinStepDeadline and MaxStepDeadline.
func ValidateStepDeadline(v string, f *field.Path) []Cause {
	if v == "" {
		return nil
	}
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return []Cause{{Field: f.String(), Type: CauseInvalid, Message: fmt.Sprintf("%q is not a duration such as 5m or 90s", v)}}
	case d < MinStepDeadline || d > MaxStepDeadline:
		return []Cause{{Field: f.String(), Type: CauseInvalid, Message: fmt.Sprintf("must be between %s and %s, got %s", MinStepDeadline, MaxStepDeadline, v)}}
	}
	return nil
}

// clipText cuts s to at most n bytes on a rune boundary, marking the cut.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-3], "") + "..."
}
