package tfrunner

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"

	"github.com/rezuscloud/rezuscloud/domain"
)

// uiWriter reads tofu's machine-readable UI (one JSON object per line).
type uiWriter struct {
	log      io.Writer
	setPhase func(string)
	buf      []byte
	summary  domain.ApplyResources
	errors   []string
	// plan is a plan's change summary (operation plan) and changes its
	// planned resource changes, in tofu's order.
	plan    domain.ApplyResources
	changes []domain.DriftResource
}

func (u *uiWriter) Write(p []byte) (int, error) {
	u.buf = append(u.buf, p...)
	for {
		i := bytes.IndexByte(u.buf, '\n')
		if i < 0 {
			break
		}
		u.line(u.buf[:i])
		u.buf = u.buf[i+1:]
	}
	return len(p), nil
}

func (u *uiWriter) flush() {
	if len(u.buf) > 0 {
		u.line(u.buf)
		u.buf = nil
	}
}

func (u *uiWriter) line(b []byte) {
	var m struct {
		Message    string `json:"@message"`
		Type       string `json:"type"`
		Diagnostic *struct {
			Severity string `json:"severity"`
			Summary  string `json:"summary"`
			Detail   string `json:"detail"`
			Address  string `json:"address"`
		} `json:"diagnostic"`
		Changes *struct {
			Add       int    `json:"add"`
			Change    int    `json:"change"`
			Remove    int    `json:"remove"`
			Operation string `json:"operation"`
		} `json:"changes"`
		Change *struct {
			Resource struct {
				Addr string `json:"addr"`
			} `json:"resource"`
			Action string `json:"action"`
		} `json:"change"`
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Message == "" && m.Type == "" {
		_, _ = u.log.Write(append(b, '\n'))
		return
	}
	line := m.Message
	switch m.Type {
	case "apply_start":
		u.setPhase(domain.ApplyApplying)
	case "change_summary":
		if m.Changes != nil {
			sum := domain.ApplyResources{Added: m.Changes.Add, Changed: m.Changes.Change, Destroyed: m.Changes.Remove}
			if m.Changes.Operation == "plan" {
				u.plan = sum
			} else {
				u.summary = sum
			}
		}
	case "planned_change":
		if c := m.Change; c != nil && c.Resource.Addr != "" {
			u.changes = append(u.changes, domain.DriftResource{Address: c.Resource.Addr, Action: c.Action})
		}
	case "diagnostic":
		if d := m.Diagnostic; d != nil {
			if d.Detail != "" {
				line += "\n  " + strings.ReplaceAll(d.Detail, "\n", "\n  ")
			}
			if d.Severity == "error" {
				msg := d.Summary
				if d.Address != "" {
					msg = d.Address + ": " + msg
				}
				if d.Detail != "" {
					msg += ": " + d.Detail
				}
				u.errors = append(u.errors, msg)
			}
		}
	}
	_, _ = io.WriteString(u.log, line+"\n")
}
