package tofu

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"

	"github.com/rezuscloud/rezuscloud/domain"
)

// UIWriter reads tofu's machine-readable UI (one JSON object per line).
type UIWriter struct {
	Log      io.Writer
	SetPhase func(string)
	buf      []byte
	Summary  domain.ApplyResources
	Errors   []string
	// plan is a plan's change summary (operation plan) and changes its
	// planned resource changes, in tofu's order.
	Plan    domain.ApplyResources
	Changes []domain.DriftResource
}

func (u *UIWriter) Write(p []byte) (int, error) {
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

func (u *UIWriter) Flush() {
	if len(u.buf) > 0 {
		u.line(u.buf)
		u.buf = nil
	}
}

func (u *UIWriter) line(b []byte) {
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
		_, _ = u.Log.Write(append(b, '\n'))
		return
	}
	line := m.Message
	switch m.Type {
	case "apply_start":
		u.SetPhase(domain.ApplyApplying)
	case "change_summary":
		if m.Changes != nil {
			sum := domain.ApplyResources{Added: m.Changes.Add, Changed: m.Changes.Change, Destroyed: m.Changes.Remove}
			if m.Changes.Operation == "plan" {
				u.Plan = sum
			} else {
				u.Summary = sum
			}
		}
	case "planned_change":
		if c := m.Change; c != nil && c.Resource.Addr != "" {
			u.Changes = append(u.Changes, domain.DriftResource{Address: c.Resource.Addr, Action: c.Action})
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
				u.Errors = append(u.Errors, msg)
			}
		}
	}
	_, _ = io.WriteString(u.Log, line+"\n")
}
