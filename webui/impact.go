package webui

import (
	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// Before a Save, an editor's "Show impact" sends the same write as a dry run
// (?dryRun=All: nothing is stored) and shows what it would do to each
// machine: its config changing in place or with a reboot (Talos's own
// dry-run answer), machines created or destroyed.

// impactShown is the impact panel of an editor: the dry run's answer, or
// why there is none.
type impactShown struct {
	Impact *domain.ChangeImpact
	Err    string
}

// wantsImpact reports whether the editor's form asked for the impact
// instead of a Save.
func wantsImpact(c echo.Context) bool { return c.FormValue("preview") == "impact" }

// dryRunImpact sends a write as a dry run and returns its impact; a refusal
// (a bad field, a conflict) is the error, as the write's would be.
func (u *UI) dryRunImpact(c echo.Context, method, path string, body any) (impactShown, error) {
	var out struct {
		Impact      *domain.ChangeImpact `json:"impact"`
		ImpactError string               `json:"impactError"`
	}
	if err := u.api.call(c.Request(), apiRequest{Method: method, Path: path + "?dryRun=All", Body: body}, &out); err != nil {
		return impactShown{}, err
	}
	if out.Impact == nil {
		msg := out.ImpactError
		if msg == "" {
			msg = "this server does not compute the impact of changes"
		}
		return impactShown{Err: msg}, nil
	}
	return impactShown{Impact: out.Impact}, nil
}

// impactVerb says what a machine's action means, in the editor's words.
func impactVerb(m domain.MachineImpact) string {
	switch m.Action {
	case domain.ImpactReconfigure:
		return "config changes, no reboot"
	case domain.ImpactReboot:
		return "config changes, reboot (drained first)"
	case domain.ImpactReimage:
		return "re-image: new schematic, same Talos version (drained first)"
	case domain.ImpactCreate:
		return "created"
	case domain.ImpactDestroy:
		return "drained and destroyed"
	}
	return "unchanged"
}

// touched are the machines a change does something to.
func touched(imp *domain.ChangeImpact) []domain.MachineImpact {
	var out []domain.MachineImpact
	for _, m := range imp.Machines {
		if m.Action != domain.ImpactNone {
			out = append(out, m)
		}
	}
	return out
}
