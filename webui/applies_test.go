package webui

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// opsRecordApply creates an apply as the apply worker does (the API refuses
// to) and waits until the read model has it.
func opsRecordApply(t *testing.T, s *uiStack, tenant, name string) {
	t.Helper()
	spec, err := json.Marshal(domain.ApplySpec{Operation: domain.OperationApply, Trigger: domain.TriggerChange, Generation: 1,
		Sources: []string{"Tenant/" + tenant + "@1"}})
	require.NoError(t, err)
	ref := domain.Ref{Kind: domain.ApplyKind.Kind, Tenant: tenant, Name: name}
	res, err := s.env.Store.Execute(context.Background(), domain.Command{Op: domain.OpCreate, Ref: ref, Actor: "test", Now: time.Now(),
		NewUID: "uid-" + name, Object: &domain.Object{Metadata: domain.ObjectMeta{Name: name, Tenant: tenant}, Spec: spec}}, eventstore.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, s.cache.WaitFor(context.Background(), res.Seq))
}

// opsSetApplyStatus writes an apply's status as the worker does and waits for the read model.
func opsSetApplyStatus(t *testing.T, s *uiStack, tenant, name string, st domain.ApplyStatus) {
	t.Helper()
	raw, err := json.Marshal(st)
	require.NoError(t, err)
	ref := domain.Ref{Kind: domain.ApplyKind.Kind, Tenant: tenant, Name: name}
	res, err := s.env.Store.Execute(context.Background(), domain.Command{Op: domain.OpUpdateStatus, Ref: ref, Actor: "test", Now: time.Now(),
		Object: &domain.Object{Status: raw}}, eventstore.UpdateOptions{Retries: 3})
	require.NoError(t, err)
	require.NoError(t, s.cache.WaitFor(context.Background(), res.Seq))
}

func applyRunning(phase string) domain.ApplyStatus {
	start := time.Now().Add(-time.Minute)
	return domain.ApplyStatus{Phase: phase, StartTime: &start, Attempt: 1, Replica: "replica-a", Holder: "replica-a"}
}

func applyFinished(phase string, errMsg string) domain.ApplyStatus {
	st := applyRunning(phase)
	end := time.Now()
	st.EndTime, st.Error = &end, errMsg
	st.Resources = domain.ApplyResources{Added: 3, Changed: 1, Destroyed: 0}
	return st
}

func TestApplyPageAndTable(t *testing.T) {
	s := newOpsStack(t)
	opsAcme(s)
	opsRecordApply(t, s, "acme", "apply-1")
	opsSetApplyStatus(t, s, "acme", "apply-1", applyRunning(domain.ApplyApplying))
	opsRecordApply(t, s, "acme", "apply-0")
	opsSetApplyStatus(t, s, "acme", "apply-0", applyFinished(domain.ApplyFailed, "Error: creating server: quota exceeded\nmore detail"))

	editor := s.signIn("ed", domain.RoleEdit)
	rows := editor.liveEventWith("/ui/test/live/ops/acme", "applies", 10*time.Second, `data-apply="apply-1"`, `data-apply="apply-0"`)
	require.Contains(t, rows, `href="/ui/tenants/acme/applies/apply-1"`)
	require.Contains(t, rows, `data-phase="Applying"`)
	require.Contains(t, rows, `data-phase="Failed"`)
	require.Contains(t, rows, "Error: creating server: quota exceeded…", "the error's first line")
	require.Contains(t, rows, "apply · change")
	require.Contains(t, rows, "+3")
	require.Contains(t, rows, "1m", "the duration")
	require.NotContains(t, rows, "data-mutating")

	page := editor.get("/ui/tenants/acme/applies/apply-1")
	require.Equal(t, http.StatusOK, page.Code, page.Body)
	require.Contains(t, page.Body, `sse-connect="/ui/live/tenants/acme/applies/apply-1/log"`)
	require.Contains(t, page.Body, `sse-close="ended"`)
	require.Contains(t, page.Body, `sse-swap="log"`)
	require.Contains(t, page.Body, `data-testid="cancel-apply"`)
	require.Contains(t, page.Body, `<dd data-testid="apply-replica">replica-a</dd>`, "the replica that ran it")
	require.Contains(t, page.Body, "Tenant/acme@1")
	failed := editor.get("/ui/tenants/acme/applies/apply-0")
	require.Equal(t, http.StatusOK, failed.Code)
	require.NotContains(t, failed.Body, `data-testid="cancel-apply"`, "a finished apply cannot be canceled")
	require.Contains(t, failed.Body, `data-testid="apply-error"`)

	viewer := s.signIn("vi", domain.RoleView)
	page = viewer.get("/ui/tenants/acme/applies/apply-1")
	require.Equal(t, http.StatusOK, page.Code)
	require.NotContains(t, page.Body, "data-mutating")

	missing := editor.get("/ui/tenants/acme/applies/nope")
	require.Equal(t, http.StatusNotFound, missing.Code)
	require.Contains(t, missing.Body, `data-testid="error-message"`)
}

func TestApplyCancel(t *testing.T) {
	s := newOpsStack(t)
	opsAcme(s)
	opsRecordApply(t, s, "acme", "apply-1")
	opsSetApplyStatus(t, s, "acme", "apply-1", applyRunning(domain.ApplyPlanning))

	// The harness runs no apply worker: the API answers 503, shown as an error.
	editor := s.signIn("ed", domain.RoleEdit)
	editor.get("/ui/tenants/acme/applies/apply-1")
	r := editor.hx(http.MethodPost, "/ui/tenants/acme/applies/apply-1/cancel", nil)
	require.Equal(t, http.StatusServiceUnavailable, r.Code, r.Body)
	require.Equal(t, "#flash", r.Header.Get("HX-Retarget"))
	require.Contains(t, r.Body, `data-testid="flash-error"`)
	require.Contains(t, r.Body, "the apply worker is not enabled")

	viewer := s.signIn("vi", domain.RoleView)
	r = viewer.hx(http.MethodPost, "/ui/tenants/acme/applies/apply-1/cancel", nil)
	require.Equal(t, http.StatusForbidden, r.Code, r.Body)
	require.Contains(t, r.Body, `data-testid="flash-error"`)
}

// applyLogEvents reads the apply log stream at path until "done", calling on for
// each event; it returns the events in order as "event: data".
func applyLogEvents(t *testing.T, b *browser, path string, on func(event, data string)) []string {
	t.Helper()
	var seen []string
	ok := b.liveEvents(path, 20*time.Second, func(e, data string) bool {
		seen = append(seen, e+": "+data)
		if on != nil {
			on(e, data)
		}
		return e == "done"
	})
	require.True(t, ok, "no done event; saw:\n%s", strings.Join(seen, "\n"))
	return seen
}

// applyLogText is what the browser's log element holds after the log events.
func applyLogText(events []string) string {
	var b strings.Builder
	for _, e := range events {
		if data, ok := strings.CutPrefix(e, "log: "); ok {
			// liveEvents ends each data field with a line break; SSE joins them
			// with line breaks and drops the last.
			b.WriteString(strings.TrimSuffix(data, "\n"))
		}
	}
	return strings.ReplaceAll(b.String(), applyLogReset, "")
}

func TestApplyLogStreamsLive(t *testing.T) {
	s := newOpsStack(t)
	opsAcme(s)
	opsRecordApply(t, s, "acme", "apply-1")
	opsSetApplyStatus(t, s, "acme", "apply-1", applyRunning(domain.ApplyApplying))
	lw := s.logs.Writer(context.Background(), "acme", "apply-1")
	_, _ = lw.Write([]byte("line one <b>&\n"))
	b := s.signIn("vi", domain.RoleView)

	wroteTwo, finishedRun := false, false
	events := applyLogEvents(t, b, "/ui/live/tenants/acme/applies/apply-1/log", func(e, data string) {
		switch {
		case e == "log" && strings.Contains(data, "line one") && !wroteTwo:
			wroteTwo = true
			_, _ = lw.Write([]byte("line two\r\nprogress 50%\rprogress 100%\n"))
		case e == "log" && strings.Contains(data, "progress 100%") && !finishedRun:
			finishedRun = true
			opsSetApplyStatus(t, s, "acme", "apply-1", applyFinished(domain.ApplySucceeded, ""))
			require.NoError(t, lw.Close())
		}
	})
	require.True(t, strings.HasPrefix(events[0], "status: "), events[0])
	require.Contains(t, events[0], `data-phase="Applying"`)
	require.NotContains(t, events[0], "data-mutating", "a viewer gets no cancel button")
	require.True(t, strings.HasPrefix(events[1], "log: "+applyLogReset), events[1])
	require.Equal(t, "line one &lt;b&gt;&amp;\nline two\nprogress 50%\nprogress 100%\n", applyLogText(events))
	last := events[len(events)-1]
	require.Contains(t, last, "done: ")
	require.Contains(t, last, "Succeeded")
	var sawFinal bool
	for _, e := range events {
		if strings.HasPrefix(e, "status: ") && strings.Contains(e, `data-phase="Succeeded"`) {
			sawFinal = true
		}
	}
	require.True(t, sawFinal, "the phase badge is kept current")

	// Once over, the stored log is sent at once, then done.
	events = applyLogEvents(t, b, "/ui/live/tenants/acme/applies/apply-1/log", nil)
	require.Equal(t, "line one &lt;b&gt;&amp;\nline two\nprogress 50%\nprogress 100%\n", applyLogText(events))
}

func TestApplyLogWaitsForTheFinalPhase(t *testing.T) {
	s := newOpsStack(t)
	opsAcme(s)
	opsRecordApply(t, s, "acme", "apply-1")
	opsSetApplyStatus(t, s, "acme", "apply-1", applyRunning(domain.ApplyPlanning))
	lw := s.logs.Writer(context.Background(), "acme", "apply-1")
	_, _ = lw.Write([]byte("planning\n"))
	b := s.signIn("ed", domain.RoleEdit)

	// The worker closes the log before it records the final phase: the
	// stream ends only once that phase is there.
	closed, failed := false, false
	events := applyLogEvents(t, b, "/ui/live/tenants/acme/applies/apply-1/log", func(e, data string) {
		switch {
		case e == "status" && !closed:
			require.Contains(t, data, `data-testid="cancel-apply"`, "an editor may cancel while it runs")
		case e == "log" && strings.Contains(data, "planning") && !closed:
			closed = true
			require.NoError(t, lw.Close())
		}
		if closed && e == "status" && !failed && strings.Contains(data, "Planning") {
			failed = true
			opsSetApplyStatus(t, s, "acme", "apply-1", applyFinished(domain.ApplyFailed, "tofu said no"))
		}
	})
	require.True(t, failed)
	last := events[len(events)-1]
	require.Contains(t, last, "Failed")
	require.Contains(t, events[len(events)-2], "tofu said no")
	require.NotContains(t, events[len(events)-2], `data-testid="cancel-apply"`)
}

func TestApplyLogOfAPrunedLog(t *testing.T) {
	s := newOpsStack(t)
	opsAcme(s)
	opsRecordApply(t, s, "acme", "old")
	opsSetApplyStatus(t, s, "acme", "old", applyFinished(domain.ApplySucceeded, ""))
	b := s.signIn("vi", domain.RoleView)
	events := applyLogEvents(t, b, "/ui/live/tenants/acme/applies/old/log", nil)
	require.Contains(t, applyLogText(events), "[the log is not available")
	require.Contains(t, events[len(events)-1], "Succeeded")

	// An apply that does not exist ends the stream for good, saying so (an
	// error answer would have the browser reconnect over and over).
	r := b.get("/ui/live/tenants/acme/applies/nope/log")
	require.Equal(t, http.StatusOK, r.Code)
	require.Equal(t, "text/event-stream", r.Header.Get("Content-Type"))
	require.Contains(t, r.Body, "event: ended\n")
	require.Contains(t, r.Body, `data-testid="live-ended"`)
}

func TestReadLogChunks(t *testing.T) {
	long := strings.Repeat("x", 70<<10)
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"whole lines", "a\nb\n", "a\nb\n"},
		{"a last line without a break", "a\nb", "a\nb"},
		{"carriage returns", "a\r\nb\rc\n", "a\nb\nc\n"},
		{"a line too long for one chunk", long + "\n", long + "\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := make(chan string)
			go readLogChunks(context.Background(), strings.NewReader(tc.in), out)
			var got strings.Builder
			for c := range out {
				require.NotEmpty(t, c)
				if !strings.HasSuffix(c, "\n") {
					require.True(t, len(c) >= 64<<10 || got.Len()+len(c) == len(tc.in), "only an overlong line or the end is cut mid-line")
				}
				got.WriteString(c)
			}
			require.Equal(t, tc.want, got.String())
		})
	}
}
