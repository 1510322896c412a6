package webui

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// groupBindingForm is the create form of a group binding: its name, the
// provider groups (comma-separated), the global role and tenant binding
// rows, and the API's refusal.
type groupBindingForm struct {
	Name, Groups, Role string
	Bindings           []bindingRow
	Errors             formErrors
}

var groupBindingFields = []string{"metadata.name", "spec.groups", "spec.role"}

func (u *UI) groupBindingsPage(c echo.Context) error {
	gbs, err := listOf[domain.GroupBinding](u, c.Request(), "/groupbindings")
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, GroupBindingsPage(u, viewerOf(c), gbs, groupBindingForm{Role: domain.RoleNone}))
}

// createGroupBinding creates a group binding, or adds or removes a tenant
// binding row of the form.
func (u *UI) createGroupBinding(c echo.Context) error {
	v := viewerOf(c)
	f := groupBindingForm{Name: strings.TrimSpace(c.FormValue("metadata.name")), Groups: c.FormValue("spec.groups"), Role: c.FormValue("spec.role")}
	rows, op, err := readBindingRows(c)
	if err != nil {
		return u.fail(c, err)
	}
	f.Bindings = rows
	if !op.Save() {
		return render(c, http.StatusOK, groupBindingCreateForm(f))
	}
	f.Bindings = keptBindingRows(rows)
	spec := map[string]any{"groups": splitGroups(f.Groups), "role": f.Role}
	if len(f.Bindings) > 0 {
		spec["bindings"] = bindingsOf(f.Bindings)
	}
	gb := map[string]any{"apiVersion": domain.APIVersion, "kind": domain.GroupBindingKind.Kind,
		"metadata": map[string]any{"name": f.Name}, "spec": spec}
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPost, Path: "/groupbindings", Body: gb}, nil); err != nil {
		if errorCode(err) == http.StatusForbidden {
			return u.fail(c, err)
		}
		f.Errors = toFormErrors(err, append(bindingFields(len(f.Bindings)), groupBindingFields...)...)
		return render(c, errorCode(err), groupBindingCreateForm(f))
	}
	gbs, err := listOf[domain.GroupBinding](u, c.Request(), "/groupbindings")
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusCreated, groupBindingCreated(v, f.Name, gbs))
}

// deleteGroupBinding deletes one; its members lose what it gave at their
// next request.
func (u *UI) deleteGroupBinding(c echo.Context) error {
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodDelete, Path: "/groupbindings/" + c.Param("name")}, nil); err != nil {
		return u.fail(c, err)
	}
	gbs, err := listOf[domain.GroupBinding](u, c.Request(), "/groupbindings")
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, groupBindingsTable(viewerOf(c), gbs))
}

// splitGroups reads comma-separated group names (spaces around them go;
// the API judges each name).
func splitGroups(s string) []string {
	out := []string{}
	for _, g := range strings.Split(s, ",") {
		if g = strings.TrimSpace(g); g != "" {
			out = append(out, g)
		}
	}
	return out
}
