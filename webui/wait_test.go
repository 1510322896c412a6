package webui

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// A waiting step reads as domain.StepWait.Message as of its last record,
// with the since and deadline static/live.js moves its durations on from.
func TestStepWaitRendersTheMessage(t *testing.T) {
	since := time.Date(2026, 5, 1, 11, 55, 50, 0, time.UTC)
	checked, late := since.Add(250*time.Second), since.Add(11*time.Minute)
	tests := []struct {
		name string
		wait domain.StepWait
		want string
	}{
		{"checked", domain.StepWait{For: "kube-apiserver on cp-1 to answer v1.35.5", Since: since, Deadline: since.Add(10 * time.Minute),
			LastError: "connection refused", Checked: &checked},
			"waiting for kube-apiserver on cp-1 to answer v1.35.5: connection refused, 4m10s (fails in 5m50s)"},
		{"not checked yet", domain.StepWait{For: "cp-1 to be back on v1.13.0", Since: since, Deadline: since.Add(10 * time.Minute)},
			"waiting for cp-1 to be back on v1.13.0, 0s (fails in 10m)"},
		{"past its deadline", domain.StepWait{For: "etcd on cp-1 to be healthy", Since: since, Deadline: since.Add(10 * time.Minute),
			LastError: "etcd: 1 of 3 members (a, b) unhealthy", Checked: &late},
			"waiting for etcd on cp-1 to be healthy: etcd: 1 of 3 members (a, b) unhealthy, 11m (past its deadline)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			require.NoError(t, stepWait(&tt.wait).Render(context.Background(), &b))
			html := b.String()
			require.Equal(t, tt.want, regexp.MustCompile(`<[^>]*>`).ReplaceAllString(html, ""), "the text is Message's")
			require.Contains(t, html, `data-wait-since="2026-05-01T11:55:50.000Z"`)
			require.Contains(t, html, `data-wait-deadline="2026-05-01T12:05:50.000Z"`)
			require.Regexp(t, `<span data-wait-elapsed>[0-9hms]+</span> <span data-wait-left>\((fails in [0-9hms]+|past its deadline)\)</span>`, html)
		})
	}
}
