package webui

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// userForm is the create form's values and the API's refusal.
type userForm struct {
	Name, Role, DisplayName string
	Errors                  formErrors
}

// userFormFields are the create form's fields as the API names them in causes.
var userFormFields = []string{"metadata.name", "spec.role", "spec.displayName", "spec.password"}

// userEdit is one user's edit form: the user and the API's refusal.
type userEdit struct {
	User   domain.User
	Errors formErrors
}

// userPassword is one user's set-password form.
type userPassword struct {
	Name   string
	Done   bool
	Errors formErrors
}

// userRoles are the global roles; none gives access only through bindings.
var userRoles = []string{domain.RoleAdmin, domain.RoleEdit, domain.RoleView, domain.RoleNone}

// userBindings is one user's bindings form: the rows, the version they were
// read at, and the API's refusal.
type userBindings struct {
	Name, ResourceVersion string
	Rows                  []bindingRow
	Saved                 bool
	Errors                formErrors
}

func userBindingsOf(usr domain.User) userBindings {
	return userBindings{Name: usr.Metadata.Name, ResourceVersion: usr.Metadata.ResourceVersion, Rows: bindingRowsOf(usr.Spec.Bindings)}
}

func (u *UI) usersPage(c echo.Context) error {
	users, err := listOf[domain.User](u, c.Request(), "/users")
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, UsersPage(u, viewerOf(c), users, userForm{Role: domain.RoleView}))
}

// userRows answers the refreshed user list, for the controls that target it.
func (u *UI) userRows(c echo.Context, code int) error {
	users, err := listOf[domain.User](u, c.Request(), "/users")
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, code, usersList(viewerOf(c), users))
}

// createUser creates the user with its password (write-only spec.password,
// which the API hashes outside events).
func (u *UI) createUser(c echo.Context) error {
	v := viewerOf(c)
	f := userForm{Name: strings.TrimSpace(c.FormValue("metadata.name")), Role: c.FormValue("spec.role"),
		DisplayName: strings.TrimSpace(c.FormValue("spec.displayName"))}
	spec := map[string]any{"role": f.Role, "password": c.FormValue("spec.password")}
	if f.DisplayName != "" {
		spec["displayName"] = f.DisplayName
	}
	user := map[string]any{"apiVersion": domain.APIVersion, "kind": domain.UserKind.Kind,
		"metadata": map[string]any{"name": f.Name}, "spec": spec}
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPost, Path: "/users", Body: user}, nil); err != nil {
		if errorCode(err) == http.StatusForbidden {
			return u.fail(c, err)
		}
		f.Errors = toFormErrors(err, userFormFields...)
		return render(c, errorCode(err), userCreateForm(f))
	}
	users, err := listOf[domain.User](u, c.Request(), "/users")
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusCreated, userCreated(v, f.Name, users))
}

// updateUser changes a user's role and display name (the edit form) or
// disables or enables them, by a merge patch: with the resourceVersion the
// form was rendered from when it has one, so a stale edit is refused.
func (u *UI) updateUser(c echo.Context) error {
	name := c.Param("name")
	spec := map[string]any{}
	patch := map[string]any{"spec": spec}
	edit := c.FormValue("form") == "edit"
	if edit {
		spec["role"] = c.FormValue("spec.role")
		spec["displayName"] = strings.TrimSpace(c.FormValue("spec.displayName"))
	}
	switch c.FormValue("spec.disabled") {
	case "true":
		spec["disabled"] = true
	case "false":
		spec["disabled"] = false
	}
	if rv := c.FormValue("metadata.resourceVersion"); rv != "" {
		patch["metadata"] = map[string]any{"resourceVersion": rv}
	}
	var updated domain.User
	err := u.api.call(c.Request(), apiRequest{Method: http.MethodPatch, Path: "/users/" + name, Body: patch,
		ContentType: "application/merge-patch+json"}, &updated)
	if err != nil {
		if !edit || errorCode(err) == http.StatusForbidden || errorCode(err) == http.StatusNotFound {
			return u.fail(c, err)
		}
		cur, gerr := getOf[domain.User](u, c.Request(), "/users/"+name)
		if gerr != nil {
			return u.fail(c, err)
		}
		// Keep what was typed, on the current version (a conflict is resolved
		// by submitting again, now knowingly over the other change).
		cur.Spec.Role, cur.Spec.DisplayName = c.FormValue("spec.role"), c.FormValue("spec.displayName")
		return render(c, errorCode(err), userEditForm(userEdit{User: *cur, Errors: toFormErrors(err, "spec.role", "spec.displayName", "metadata.resourceVersion")}))
	}
	h := c.Response().Header()
	h.Set("HX-Retarget", "#user-rows")
	h.Set("HX-Reswap", "innerHTML")
	return u.userRows(c, http.StatusOK)
}

// updateUserBindings saves a user's bindings (a merge patch of
// spec.bindings, on condition of the version the form was read at), or adds
// or removes a row of the form. A refusal shows the API's causes beside the
// rows they name.
func (u *UI) updateUserBindings(c echo.Context) error {
	name := c.Param("name")
	rows, op, err := readBindingRows(c)
	if err != nil {
		return u.fail(c, err)
	}
	f := userBindings{Name: name, ResourceVersion: c.FormValue("metadata.resourceVersion"), Rows: rows}
	if !op.Save() {
		return render(c, http.StatusOK, userBindingsForm(f))
	}
	f.Rows = keptBindingRows(rows)
	var bindings any // null removes the field
	if len(f.Rows) > 0 {
		bindings = bindingsOf(f.Rows)
	}
	patch := map[string]any{"spec": map[string]any{"bindings": bindings}}
	if f.ResourceVersion != "" {
		patch["metadata"] = map[string]any{"resourceVersion": f.ResourceVersion}
	}
	var updated domain.User
	err = u.api.call(c.Request(), apiRequest{Method: http.MethodPatch, Path: "/users/" + name, Body: patch,
		ContentType: "application/merge-patch+json"}, &updated)
	if err != nil {
		if errorCode(err) == http.StatusForbidden || errorCode(err) == http.StatusNotFound {
			return u.fail(c, err)
		}
		f.Errors = toFormErrors(err, append(bindingFields(len(f.Rows)), "metadata.resourceVersion")...)
		if domain.ReasonOf(err) == domain.ReasonConflict {
			f.Errors.Message += " (the user changed since this form was loaded; reload the page to see the current bindings)"
		}
		return render(c, errorCode(err), userBindingsForm(f))
	}
	saved := userBindingsOf(updated)
	saved.Saved = true
	return render(c, http.StatusOK, userBindingsSaved(saved, updated.Spec.Bindings))
}

// setUserPassword sets another user's password (admins need not know the old one).
func (u *UI) setUserPassword(c echo.Context) error {
	name := c.Param("name")
	err := u.api.call(c.Request(), apiRequest{Method: http.MethodPut, Path: "/users/" + name + "/password",
		Body: map[string]string{"password": c.FormValue("password")}}, nil)
	if err != nil {
		if errorCode(err) == http.StatusForbidden || errorCode(err) == http.StatusNotFound {
			return u.fail(c, err)
		}
		return render(c, errorCode(err), userPasswordForm(userPassword{Name: name, Errors: toFormErrors(err, "password")}))
	}
	return render(c, http.StatusOK, userPasswordForm(userPassword{Name: name, Done: true}))
}

// deleteUser deletes the user; their password goes with them.
func (u *UI) deleteUser(c echo.Context) error {
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodDelete, Path: "/users/" + c.Param("name")}, nil); err != nil {
		return u.fail(c, err)
	}
	return u.userRows(c, http.StatusOK)
}
