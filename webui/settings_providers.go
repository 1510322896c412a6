package webui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/identity"
)

// providerForm is the create form's values and the API's refusal.
type providerForm struct {
	Name, Type string
	// Config is spec.config as typed: a JSON object the API validates.
	Config         string
	CredentialsRef string
	Errors         formErrors
}

// providerFormFields are the create form's fields as the API names them in causes.
var providerFormFields = []string{"metadata.name", "spec.type", "spec.config", "spec.credentialsRef"}

// providerTypes are the types the create form offers: every type but
// module, whose files come from a directory (rezusctl create provider
// --from-dir, or the API).
var providerTypes = slices.DeleteFunc(domain.ProviderTypes(), func(t string) bool { return t == domain.ProviderModule })

// credentialsForm stores provider credentials. The values typed are never
// sent back: a refused form must be filled in again.
type credentialsForm struct {
	Name   string
	Done   bool
	Errors formErrors
}

// providerRow is a provider with, for admins, what its credentials hold.
type providerRow struct {
	domain.Provider
	// Keys are the names of the variables its credentials hold (admins only).
	Keys []string
	// Credentials says what is known of them: "" (none referenced), "stored",
	// "missing", or why they could not be read.
	Credentials string
}

// providerRows reads the providers and, for admins, the variable names their
// credentials hold (never the values: the API does not answer them).
func (u *UI) providerRows(c echo.Context) ([]providerRow, error) {
	ps, err := listOf[domain.Provider](u, c.Request(), "/providers")
	if err != nil {
		return nil, err
	}
	rows := make([]providerRow, len(ps))
	for i, p := range ps {
		rows[i].Provider = p
		if p.Spec.CredentialsRef == nil || !viewerOf(c).CanAdmin() {
			continue
		}
		var view struct {
			Keys []string `json:"keys"`
		}
		err := u.api.call(c.Request(), apiRequest{Path: "/credentials/" + p.Spec.CredentialsRef.Name}, &view)
		switch {
		case err == nil:
			rows[i].Keys, rows[i].Credentials = view.Keys, "stored"
		case domain.ReasonOf(err) == domain.ReasonNotFound:
			rows[i].Credentials = "missing"
		default:
			rows[i].Credentials = errorMessage(err)
		}
	}
	return rows, nil
}

func (u *UI) providersPage(c echo.Context) error {
	rows, err := u.providerRows(c)
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, ProvidersPage(u, viewerOf(c), rows, providerForm{Type: domain.ProviderEmulated, Config: "{}"}, credentialsForm{}))
}

func (u *UI) providerRowsAnswer(c echo.Context, code int) error {
	rows, err := u.providerRows(c)
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, code, providersTable(viewerOf(c), rows))
}

// createProvider creates a provider; the API validates the type and config.
func (u *UI) createProvider(c echo.Context) error {
	v := viewerOf(c)
	f := providerForm{Name: strings.TrimSpace(c.FormValue("metadata.name")), Type: c.FormValue("spec.type"),
		Config: strings.TrimSpace(c.FormValue("spec.config")), CredentialsRef: strings.TrimSpace(c.FormValue("spec.credentialsRef"))}
	again := func(err error) error {
		f.Errors = toFormErrors(err, providerFormFields...)
		return render(c, errorCode(err), providerCreateForm(f))
	}
	spec := map[string]any{"type": f.Type}
	if f.Config != "" {
		var probe any
		if err := json.Unmarshal([]byte(f.Config), &probe); err != nil {
			// Not JSON at all cannot travel inside the body; the API checks the rest.
			return again(domain.NewInvalid(domain.ProviderKind.Kind, f.Name, []domain.Cause{{Field: "spec.config", Type: domain.CauseInvalid,
				Message: "is not valid JSON: " + err.Error()}}))
		}
		spec["config"] = json.RawMessage(f.Config)
	}
	if f.CredentialsRef != "" {
		spec["credentialsRef"] = map[string]string{"name": f.CredentialsRef}
	}
	p := map[string]any{"apiVersion": domain.APIVersion, "kind": domain.ProviderKind.Kind,
		"metadata": map[string]any{"name": f.Name}, "spec": spec}
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPost, Path: "/providers", Body: p}, nil); err != nil {
		if errorCode(err) == http.StatusForbidden {
			return u.fail(c, err)
		}
		return again(err)
	}
	rows, err := u.providerRows(c)
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusCreated, providerCreated(v, f.Name, rows))
}

func (u *UI) deleteProvider(c echo.Context) error {
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodDelete, Path: "/providers/" + c.Param("name")}, nil); err != nil {
		return u.fail(c, err)
	}
	return u.providerRowsAnswer(c, http.StatusOK)
}

// putCredentials stores (or replaces) provider credentials from KEY=value lines.
func (u *UI) putCredentials(c echo.Context) error {
	f := credentialsForm{Name: strings.TrimSpace(c.FormValue("metadata.name"))}
	again := func(err error) error {
		f.Errors = toFormErrors(err, "metadata.name", "data")
		return render(c, errorCode(err), credentialsCreateForm(f))
	}
	data, err := parseEnvLines(c.FormValue("data"))
	if err != nil {
		return again(domain.NewInvalid(identity.ProviderCredentialsKind, f.Name, []domain.Cause{{Field: "data", Type: domain.CauseInvalid, Message: err.Error()}}))
	}
	if f.Name == "" {
		return again(domain.NewInvalid(identity.ProviderCredentialsKind, f.Name, []domain.Cause{{Field: "metadata.name", Type: domain.CauseRequired, Message: "name is required"}}))
	}
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPut, Path: "/credentials/" + f.Name, Body: map[string]any{"data": data}}, nil); err != nil {
		if errorCode(err) == http.StatusForbidden {
			return u.fail(c, err)
		}
		return again(err)
	}
	rows, err := u.providerRows(c)
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, credentialsStored(viewerOf(c), f.Name, rows))
}

// parseEnvLines reads KEY=value lines; blank lines and # comments are skipped.
// The API validates the names.
func parseEnvLines(s string) (map[string]string, error) {
	out := map[string]string{}
	for i, line := range strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n") {
		if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("line %d is not NAME=value", i+1)
		}
		out[strings.TrimSpace(k)] = v
	}
	return out, nil
}

// providerSummary is a one-line view of a provider's settings.
func providerSummary(p domain.Provider) string {
	var parts []string
	var cfg map[string]any
	if len(p.Spec.Config) > 0 && json.Unmarshal(p.Spec.Config, &cfg) == nil && len(cfg) > 0 {
		keys := make([]string, 0, len(cfg))
		for k := range cfg {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			val, _ := json.Marshal(cfg[k])
			s := string(val)
			if len(s) > 40 {
				s = s[:37] + "..."
			}
			parts = append(parts, k+"="+s)
		}
	}
	if p.Spec.CredentialsRef != nil {
		parts = append(parts, "credentials: "+p.Spec.CredentialsRef.Name)
	}
	if v := p.Spec.Versions; v != nil {
		if len(v.Kubernetes) > 0 {
			parts = append(parts, "Kubernetes "+strings.Join(v.Kubernetes, " or ")+" only")
		}
		if len(v.Talos) > 0 {
			parts = append(parts, "Talos "+strings.Join(v.Talos, " or ")+" only")
		}
	}
	if len(parts) == 0 {
		return "no settings"
	}
	return strings.Join(parts, ", ")
}

// providerReady is the provider's Ready condition status, "" when unreported.
func providerReady(p domain.Provider) string {
	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status
		}
	}
	return ""
}
