package webui

import (
	"strconv"
	"strings"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// Tenant bindings are edited as rows (the user page, and the token form that
// narrows a new token): a role, and either tenant names (comma-separated) or
// a tenant label selector. The form's fields repeat per row (binding.role,
// binding.tenants, binding.tenantSelector); rows are added and removed by the
// server re-rendering the form (op=add, op=remove-N), so nothing typed is lost
// and no script is needed beyond htmx.

// bindingRow is one row as typed.
type bindingRow struct {
	Role, Tenants, Selector string
}

// bindingRoles are the roles a binding may grant.
var bindingRoles = []string{domain.RoleView, domain.RoleEdit, domain.RoleAdmin}

// bindingRowsOf lays stored bindings out as rows.
func bindingRowsOf(bs []domain.RoleBinding) []bindingRow {
	rows := make([]bindingRow, len(bs))
	for i, b := range bs {
		rows[i] = bindingRow{Role: b.Role, Tenants: strings.Join(b.Tenants, ", "), Selector: b.TenantSelector}
	}
	return rows
}

// bindingOp is what a submit of a bindings editor asks: save (""), add a
// row, or remove row Remove.
type bindingOp struct {
	Add    bool
	Remove int
}

// Save reports whether the submit saves (rather than adding or removing a row).
func (o bindingOp) Save() bool { return !o.Add && o.Remove < 0 }

// readBindingRows reads the rows of a bindings editor and the op, applying
// an add or remove to the rows.
func readBindingRows(c echo.Context) ([]bindingRow, bindingOp, error) {
	form, err := c.FormParams()
	if err != nil {
		return nil, bindingOp{Remove: -1}, domain.NewBadRequest("reading the form: " + err.Error())
	}
	roles, tenants, sels := form["binding.role"], form["binding.tenants"], form["binding.tenantSelector"]
	n := max(len(roles), len(tenants), len(sels))
	if n > domain.MaxBindings+1 {
		return nil, bindingOp{Remove: -1}, domain.NewBadRequest("too many bindings",
			domain.Cause{Field: "spec.bindings", Type: domain.CauseTooLong, Message: "must have no more than " + strconv.Itoa(domain.MaxBindings) + " bindings"})
	}
	at := func(vs []string, i int) string {
		if i < len(vs) {
			return strings.TrimSpace(vs[i])
		}
		return ""
	}
	rows := make([]bindingRow, 0, n)
	for i := range n {
		rows = append(rows, bindingRow{Role: at(roles, i), Tenants: at(tenants, i), Selector: at(sels, i)})
	}
	op := bindingOp{Remove: -1}
	switch v := form.Get("op"); {
	case v == "add":
		op.Add = true
		if len(rows) < domain.MaxBindings {
			rows = append(rows, bindingRow{Role: domain.RoleView})
		}
	case strings.HasPrefix(v, "remove-"):
		if i, err := strconv.Atoi(strings.TrimPrefix(v, "remove-")); err == nil && i >= 0 && i < len(rows) {
			op.Remove = i
			rows = append(rows[:i], rows[i+1:]...)
		} else {
			op.Remove = len(rows) // nothing to remove; not a save either
		}
	}
	return rows, op, nil
}

// keptBindingRows drops the rows that name nothing (a row added and left
// blank), so the rows saved are those shown and the API's causes
// (spec.bindings[i]) point at the row shown i-th.
func keptBindingRows(rows []bindingRow) []bindingRow {
	out := make([]bindingRow, 0, len(rows))
	for _, r := range rows {
		if r.Tenants != "" || r.Selector != "" {
			out = append(out, r)
		}
	}
	return out
}

// bindingsOf are the rows as the API takes them; the API validates them.
func bindingsOf(rows []bindingRow) []domain.RoleBinding {
	out := make([]domain.RoleBinding, 0, len(rows))
	for _, r := range rows {
		b := domain.RoleBinding{Role: r.Role, TenantSelector: r.Selector}
		for _, t := range strings.Split(r.Tenants, ",") {
			if t = strings.TrimSpace(t); t != "" {
				b.Tenants = append(b.Tenants, t)
			}
		}
		out = append(out, b)
	}
	return out
}

// bindingFields are the rows' fields as the API names them in causes, the
// most specific first (toFormErrors takes the first that matches).
func bindingFields(n int) []string {
	out := make([]string, 0, 3*n+1)
	for i := range n {
		p := "spec.bindings[" + strconv.Itoa(i) + "]"
		out = append(out, p+".role", p+".tenants", p+".tenantSelector", p)
	}
	return append(out, "spec.bindings")
}

// bindingField is row i's field f ("" for the row itself).
func bindingField(i int, f string) string {
	p := "spec.bindings[" + strconv.Itoa(i) + "]"
	if f == "" {
		return p
	}
	return p + "." + f
}

// bindingSummary says what a binding grants: "edit on acme, beta" or
// "view where env=prod".
func bindingSummary(b domain.RoleBinding) string {
	if b.TenantSelector != "" {
		return b.Role + " where " + b.TenantSelector
	}
	return b.Role + " on " + strings.Join(b.Tenants, ", ")
}

// bindingEditor is where a bindings editor's add and remove buttons send the
// form: method and URL of the form, and the element the answer replaces.
type bindingEditor struct {
	Method, URL, Target, Swap string
}

// attrs are the htmx attributes of a button sending the form with op.
func (e bindingEditor) attrs(op string) templ.Attributes {
	return templ.Attributes{
		"hx-" + strings.ToLower(e.Method): e.URL,
		"hx-include":                      "closest form",
		"hx-vals":                         `{"op":"` + op + `"}`,
		"hx-target":                       e.Target,
		"hx-swap":                         e.Swap,
	}
}

func removeOp(i int) string { return "remove-" + strconv.Itoa(i) }
