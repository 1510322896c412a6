package webui

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestUsersPageListsUsersForAdmins(t *testing.T) {
	s := newUIStack(t)
	s.apiCall(http.MethodPost, "/users", map[string]any{"apiVersion": "rezuscloud.io/v1", "kind": "User",
		"metadata": map[string]any{"name": "jane"}, "spec": map[string]any{"role": "edit", "displayName": "Jane Doe", "disabled": true}}, nil)
	b := s.signIn("boss", "admin")
	p := b.get("/ui/settings/users")
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	require.Contains(t, p.Body, `data-user="jane"`)
	require.Contains(t, p.Body, "Jane Doe")
	require.Contains(t, p.Body, `data-testid="user-disabled"`)
	require.Contains(t, p.Body, `data-testid="user-create"`)
	require.Contains(t, p.Body, `data-testid="enable-user"`)
	require.Contains(t, p.Body, `aria-current="page" data-tab="Users"`)
	// Admins cannot disable or delete themselves from the list (the API would
	// let them lock themselves out).
	require.Contains(t, p.Body, `hx-delete="/ui/settings/users/jane"`)
	require.NotContains(t, p.Body, `hx-delete="/ui/settings/users/boss"`)
	require.Contains(t, p.Body, `hx-confirm="Delete user jane?`)
}

func TestUsersCreate(t *testing.T) {
	s := newUIStack(t)
	b := s.signIn("boss", "admin")
	b.get("/ui/settings/users")

	for _, tc := range []struct {
		name  string
		form  url.Values
		code  int
		field string
	}{
		{"capitals in the name", url.Values{"metadata.name": {"Jane"}, "spec.role": {"view"}, "spec.password": {"long-enough-password"}}, http.StatusUnprocessableEntity, "metadata.name"},
		{"weak password", url.Values{"metadata.name": {"jane"}, "spec.role": {"view"}, "spec.password": {"short"}}, http.StatusUnprocessableEntity, "spec.password"},
		{"empty password", url.Values{"metadata.name": {"jane"}, "spec.role": {"view"}, "spec.password": {""}}, http.StatusUnprocessableEntity, "spec.password"},
		{"unknown role", url.Values{"metadata.name": {"jane"}, "spec.role": {"root"}, "spec.password": {"long-enough-password"}}, http.StatusUnprocessableEntity, "spec.role"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := b.hx(http.MethodPost, "/ui/settings/users", tc.form)
			require.Equal(t, tc.code, p.Code, p.Body)
			require.Contains(t, p.Body, `data-field-error="`+tc.field+`"`)
			require.Contains(t, p.Body, `data-testid="form-error"`)
			require.Contains(t, p.Body, `value="`+tc.form.Get("metadata.name")+`"`, "what was typed is kept")
			if pw := tc.form.Get("spec.password"); pw != "" {
				require.NotContains(t, p.Body, pw, "the password is not sent back")
			}
		})
	}
	code, _ := s.apiRaw(http.MethodGet, "/users/jane", nil)
	require.Equal(t, http.StatusNotFound, code)

	p := b.hx(http.MethodPost, "/ui/settings/users", url.Values{"metadata.name": {"jane"}, "spec.role": {"edit"},
		"spec.password": {"long-enough-password"}, "spec.displayName": {"Jane Doe"}})
	require.Equal(t, http.StatusCreated, p.Code, p.Body)
	require.Contains(t, p.Body, "User jane was created")
	require.Contains(t, p.Body, `id="user-rows" hx-swap-oob="innerHTML"`)
	require.Contains(t, p.Body, `data-user="jane"`)
	var u domain.User
	s.apiCall(http.MethodGet, "/users/jane", nil, &u)
	require.Equal(t, "edit", u.Spec.Role)
	require.Equal(t, "Jane Doe", u.Spec.DisplayName)
	require.True(t, settingsCanSignIn(s, "jane", "long-enough-password"))

	dup := b.hx(http.MethodPost, "/ui/settings/users", url.Values{"metadata.name": {"jane"}, "spec.role": {"edit"}, "spec.password": {"long-enough-password"}})
	require.Equal(t, http.StatusConflict, dup.Code, dup.Body)
	require.Contains(t, dup.Body, `data-testid="form-error"`)
}

func TestUsersEditDisablePasswordDelete(t *testing.T) {
	s := newUIStack(t)
	s.createUser("jane", "view", "pw-jane-123456789")
	b := s.signIn("boss", "admin")
	b.get("/ui/settings/users")
	var u domain.User
	s.apiCall(http.MethodGet, "/users/jane", nil, &u)

	// Role and display name, with the version the form was rendered from.
	p := b.hx(http.MethodPut, "/ui/settings/users/jane", url.Values{"form": {"edit"}, "metadata.resourceVersion": {u.Metadata.ResourceVersion},
		"spec.role": {"edit"}, "spec.displayName": {"Jane"}})
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	require.Equal(t, "#user-rows", p.Header.Get("HX-Retarget"))
	require.Contains(t, p.Body, `data-user="jane"`)
	s.apiCall(http.MethodGet, "/users/jane", nil, &u)
	require.Equal(t, "edit", u.Spec.Role)
	require.Equal(t, "Jane", u.Spec.DisplayName)

	t.Run("stale version", func(t *testing.T) {
		p := b.hx(http.MethodPut, "/ui/settings/users/jane", url.Values{"form": {"edit"}, "metadata.resourceVersion": {"1"}, "spec.role": {"admin"}})
		require.Equal(t, http.StatusConflict, p.Code, p.Body)
		require.Contains(t, p.Body, `data-testid="form-error"`)
		require.Contains(t, p.Body, `value="`+u.Metadata.ResourceVersion+`"`, "the form is offered again on the current version")
	})
	t.Run("bad role", func(t *testing.T) {
		p := b.hx(http.MethodPut, "/ui/settings/users/jane", url.Values{"form": {"edit"}, "spec.role": {"root"}})
		require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
		require.Contains(t, p.Body, `data-field-error="spec.role"`)
	})

	// Disable, then enable.
	p = b.hx(http.MethodPut, "/ui/settings/users/jane", url.Values{"spec.disabled": {"true"}})
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	require.Contains(t, p.Body, `data-testid="user-disabled"`)
	require.False(t, settingsCanSignIn(s, "jane", "pw-jane-123456789"))
	p = b.hx(http.MethodPut, "/ui/settings/users/jane", url.Values{"spec.disabled": {"false"}})
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	require.NotContains(t, p.Body, `data-testid="user-disabled"`)
	require.True(t, settingsCanSignIn(s, "jane", "pw-jane-123456789"))

	// Password.
	weak := b.hx(http.MethodPut, "/ui/settings/users/jane/password", url.Values{"password": {"short"}})
	require.Equal(t, http.StatusUnprocessableEntity, weak.Code, weak.Body)
	require.Contains(t, weak.Body, `data-field-error="password"`)
	set := b.hx(http.MethodPut, "/ui/settings/users/jane/password", url.Values{"password": {"a-new-password-for-jane"}})
	require.Equal(t, http.StatusOK, set.Code, set.Body)
	require.Contains(t, set.Body, `data-testid="password-set"`)
	require.True(t, settingsCanSignIn(s, "jane", "a-new-password-for-jane"))
	require.False(t, settingsCanSignIn(s, "jane", "pw-jane-123456789"))

	missing := b.hx(http.MethodPut, "/ui/settings/users/nobody/password", url.Values{"password": {"a-new-password-for-x"}})
	require.Equal(t, http.StatusNotFound, missing.Code, missing.Body)

	// Delete.
	del := b.hx(http.MethodDelete, "/ui/settings/users/jane", nil)
	require.Equal(t, http.StatusOK, del.Code, del.Body)
	require.NotContains(t, del.Body, `data-user="jane"`)
	require.Contains(t, del.Body, `data-user="boss"`)
	code, _ := s.apiRaw(http.MethodGet, "/users/jane", nil)
	require.Equal(t, http.StatusNotFound, code)
	require.False(t, settingsCanSignIn(s, "jane", "a-new-password-for-jane"))
	again := b.hx(http.MethodDelete, "/ui/settings/users/jane", nil)
	require.Equal(t, http.StatusNotFound, again.Code)
	require.Equal(t, "#flash", again.Header.Get("HX-Retarget"))
}

// bindingForm is a bindings editor's submit: rows of role, tenants, selector.
func bindingForm(rv string, rows ...[3]string) url.Values {
	v := url.Values{}
	if rv != "" {
		v.Set("metadata.resourceVersion", rv)
	}
	for _, r := range rows {
		v.Add("binding.role", r[0])
		v.Add("binding.tenants", r[1])
		v.Add("binding.tenantSelector", r[2])
	}
	return v
}

// An admin edits a user's tenant bindings on the user page: rows added and
// removed by the server, saved with a merge patch; the API's refusal shows
// beside the row and field it names; the user then has those roles.
func TestUsersEditBindings(t *testing.T) {
	s := newUIStack(t)
	s.createTenant("acme", nil)
	s.createTenant("beta", map[string]string{"env": "prod"})
	s.createTenant("gamma", nil)
	s.createUser("jane", domain.RoleNone, "pw-jane-123456789")
	admin := s.signIn("boss", "admin")
	var jane domain.User
	s.apiCall(http.MethodGet, "/users/jane", nil, &jane)
	usersPage := admin.get("/ui/settings/users")
	require.Contains(t, usersPage.Body, `hx-put="/ui/settings/users/jane/bindings"`)
	require.Contains(t, usersPage.Body, `<option value="none" selected`, "jane's global role is none")
	stored := func() []domain.RoleBinding {
		var u domain.User
		s.apiCall(http.MethodGet, "/users/jane", nil, &u)
		return u.Spec.Bindings
	}

	t.Run("add and remove rows without saving", func(t *testing.T) {
		v := bindingForm(jane.Metadata.ResourceVersion, [3]string{"edit", "acme", ""})
		v.Set("op", "add")
		p := admin.hx(http.MethodPut, "/ui/settings/users/jane/bindings", v)
		require.Equal(t, http.StatusOK, p.Code, p.Body)
		require.Contains(t, p.Body, `data-binding-row="1"`)
		require.Contains(t, p.Body, `value="acme"`, "what was typed stays")
		v = bindingForm(jane.Metadata.ResourceVersion, [3]string{"edit", "acme", ""}, [3]string{"view", "", "env=prod"})
		v.Set("op", "remove-0")
		p = admin.hx(http.MethodPut, "/ui/settings/users/jane/bindings", v)
		require.Equal(t, http.StatusOK, p.Code, p.Body)
		require.NotContains(t, p.Body, `data-binding-row="1"`)
		require.NotContains(t, p.Body, `value="acme"`)
		require.Contains(t, p.Body, `value="env=prod"`)
		require.Empty(t, stored(), "adding or removing a row saves nothing")
	})

	p := admin.hx(http.MethodPut, "/ui/settings/users/jane/bindings", bindingForm(jane.Metadata.ResourceVersion,
		[3]string{"edit", "acme, beta", ""}, [3]string{"view", "", ""}, [3]string{"admin", "", "env=prod"}))
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	require.Contains(t, p.Body, `data-testid="bindings-saved"`)
	require.Contains(t, p.Body, `hx-swap-oob="innerHTML"`)
	require.Contains(t, p.Body, "edit on acme, beta")
	require.Contains(t, p.Body, "admin where env=prod")
	require.Equal(t, []domain.RoleBinding{{Role: "edit", Tenants: []string{"acme", "beta"}}, {Role: "admin", TenantSelector: "env=prod"}},
		stored(), "the blank row is left out")
	require.Contains(t, admin.get("/ui/settings/users").Body, "edit on acme, beta", "the users list shows bindings")

	// Jane now writes on acme and beta, and sees nothing of gamma.
	j := s.login("jane", "pw-jane-123456789")
	require.Contains(t, j.get("/ui/tenants/acme").Body, `data-testid="delete-tenant"`)
	require.Equal(t, http.StatusNotFound, j.get("/ui/tenants/gamma").Code)
	require.Contains(t, j.get("/ui/settings").Body, `data-tab="Audit log"`, "admin of beta by the selector")

	s.apiCall(http.MethodGet, "/users/jane", nil, &jane)
	for _, tc := range []struct {
		name  string
		rows  [][3]string
		field string
	}{
		{"bad selector", [][3]string{{"edit", "acme", ""}, {"view", "", "env in (a"}}, "spec.bindings[1].tenantSelector"},
		{"bad tenant name", [][3]string{{"edit", "acme, Not_A_Name", ""}}, "spec.bindings[0].tenants"},
		{"names and a selector", [][3]string{{"edit", "acme", "env=prod"}}, "spec.bindings[0]"},
		{"bad role", [][3]string{{"root", "acme", ""}}, "spec.bindings[0].role"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := admin.hx(http.MethodPut, "/ui/settings/users/jane/bindings", bindingForm(jane.Metadata.ResourceVersion, tc.rows...))
			require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
			require.Contains(t, p.Body, `data-testid="form-error"`)
			require.Contains(t, p.Body, `data-field-error="`+tc.field+`"`)
			require.Contains(t, p.Body, `data-testid="user-bindings"`, "the form is offered again with what was typed")
			require.Len(t, stored(), 2, "nothing was saved")
		})
	}

	t.Run("stale version", func(t *testing.T) {
		p := admin.hx(http.MethodPut, "/ui/settings/users/jane/bindings", bindingForm("1", [3]string{"view", "gamma", ""}))
		require.Equal(t, http.StatusConflict, p.Code, p.Body)
		require.Contains(t, p.Body, "reload the page")
		require.Len(t, stored(), 2)
	})

	t.Run("not for non-admins", func(t *testing.T) {
		ed := s.signIn("eddie", "edit")
		ed.get("/ui/settings")
		p := ed.hx(http.MethodPut, "/ui/settings/users/jane/bindings", bindingForm("", [3]string{"admin", "gamma", ""}))
		require.Equal(t, http.StatusForbidden, p.Code, p.Body)
		require.Len(t, stored(), 2)
	})

	t.Run("clear", func(t *testing.T) {
		p := admin.hx(http.MethodPut, "/ui/settings/users/jane/bindings", bindingForm(""))
		require.Equal(t, http.StatusOK, p.Code, p.Body)
		require.Contains(t, p.Body, `data-testid="no-bindings"`)
		require.Empty(t, stored())
		require.Equal(t, http.StatusNotFound, j.get("/ui/tenants/acme").Code)
	})
}
