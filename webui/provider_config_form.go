package webui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
	"go.yaml.in/yaml/v3"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/providers"
)

// providerConfigPrefix prefixes the form names of providerConfig keys
// ("providerConfig.flavor"); the free-form editor is providerConfigRaw.
const (
	providerConfigPrefix = "providerConfig."
	providerConfigRaw    = "providerConfig"
)

// providerConfigRoutes serve the providerConfig part of the create-tenant
// and add-node-group forms for the provider chosen.
func (u *UI) providerConfigRoutes(p *pages) {
	p.GET("/provider-config-fields", u.providerConfigFieldsFragment)
}

// providerConfigForm is the providerConfig part of a form: one field per key
// its provider type reads, or, for a module provider, a YAML or JSON editor;
// what was typed; and the causes of a refusal, under the API's field names
// (spec.providerConfig.KEY, or spec.providerConfig for the editor).
type providerConfigForm struct {
	// Provider is the Provider's name, Type its spec.type ("" when unknown).
	Provider, Type string
	Fields         []domain.ProviderConfigField
	// Values are the typed values by key; Raw the editor's text.
	Values map[string]string
	Raw    string
	Errors formErrors
}

// FreeForm says whether the provider takes any object (module providers, or
// a type without a field list): it gets the editor.
func (f providerConfigForm) FreeForm() bool { return f.Provider != "" && f.Fields == nil }

// FieldNames are the form's error fields, for toFormErrors.
func (f providerConfigForm) FieldNames() []string {
	names := []string{"spec.providerConfig"}
	for _, fd := range f.Fields {
		names = append([]string{"spec.providerConfig." + fd.Key}, names...)
	}
	return names
}

// newProviderConfigForm reads the provider (through the API, as the user)
// and the values the form sent; a provider that cannot be read gets the
// editor, and its refusal is the API's when the group is written.
func (u *UI) newProviderConfigForm(r *http.Request, provider string, form url.Values) (providerConfigForm, *domain.Provider) {
	f := providerConfigForm{Provider: provider, Values: map[string]string{}}
	if provider == "" {
		return f, nil
	}
	p, err := getOf[domain.Provider](u, r, "/providers/"+url.PathEscape(provider))
	if err == nil {
		f.Type = p.Spec.Type
		f.Fields = providers.GroupConfigFields(p.Spec.Type)
	} else {
		p = nil
	}
	for _, fd := range f.Fields {
		v := form[providerConfigPrefix+fd.Key]
		if fd.Kind == domain.ConfigBool {
			f.Values[fd.Key] = strconv.FormatBool(len(v) > 0 && v[len(v)-1] != "" && v[len(v)-1] != "false")
			continue
		}
		if len(v) > 0 {
			f.Values[fd.Key] = strings.TrimSpace(v[0])
		}
	}
	f.Raw = strings.TrimSpace(form.Get(providerConfigRaw))
	return f, p
}

// build turns the form into a providerConfig object; causes name the field
// at fault. Empty fields are left out (the provider's defaults apply).
func (f providerConfigForm) build() (json.RawMessage, []domain.Cause) {
	if f.Provider == "" {
		return nil, nil
	}
	if f.FreeForm() {
		if f.Raw == "" {
			return nil, nil
		}
		var v any
		if err := yaml.Unmarshal([]byte(f.Raw), &v); err != nil {
			return nil, []domain.Cause{{Field: "spec.providerConfig", Type: domain.CauseInvalid, Message: "is neither YAML nor JSON: " + strings.TrimPrefix(err.Error(), "yaml: ")}}
		}
		if _, ok := v.(map[string]any); !ok {
			return nil, []domain.Cause{{Field: "spec.providerConfig", Type: domain.CauseInvalid, Message: "must be an object (key: value), not a list or a single value"}}
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, []domain.Cause{{Field: "spec.providerConfig", Type: domain.CauseInvalid, Message: "cannot be written as JSON: " + err.Error()}}
		}
		return raw, nil
	}
	out := map[string]any{}
	var causes []domain.Cause
	for _, fd := range f.Fields {
		s := f.Values[fd.Key]
		field := "spec.providerConfig." + fd.Key
		switch fd.Kind {
		case domain.ConfigBool:
			if s == "true" {
				out[fd.Key] = true
			}
			continue
		case domain.ConfigStrings:
			if list := splitList(s); len(list) > 0 {
				out[fd.Key] = list
			}
			continue
		}
		if s == "" {
			continue
		}
		switch fd.Kind {
		case domain.ConfigNumber:
			n, err := strconv.ParseFloat(s, 64)
			if err != nil {
				causes = append(causes, domain.Cause{Field: field, Type: domain.CauseInvalid, Message: fmt.Sprintf("%q is not a number", s)})
				continue
			}
			out[fd.Key] = n
		case domain.ConfigInteger:
			n, err := strconv.Atoi(s)
			if err != nil {
				causes = append(causes, domain.Cause{Field: field, Type: domain.CauseInvalid, Message: fmt.Sprintf("%q is not a whole number", s)})
				continue
			}
			out[fd.Key] = n
		default:
			out[fd.Key] = s
		}
	}
	if len(causes) > 0 {
		return nil, causes
	}
	if len(out) == 0 {
		return nil, nil
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, []domain.Cause{{Field: "spec.providerConfig", Type: domain.CauseInvalid, Message: err.Error()}}
	}
	return raw, nil
}

// check builds the config and runs the provider's own validation of it
// for a group of role: the causes the API would give when the group is
// written.
func (f providerConfigForm) check(p *domain.Provider, role string) (json.RawMessage, []domain.Cause) {
	raw, causes := f.build()
	if len(causes) > 0 || p == nil {
		return raw, causes
	}
	return raw, providers.ValidateGroupConfig(p, &domain.NodeGroupSpec{Role: role, Provider: f.Provider, ProviderConfig: raw})
}

// providerConfigFieldsFragment answers the providerConfig part for the
// provider a form chose (the create-tenant form names it provider, the
// add-node-group form spec.provider).
func (u *UI) providerConfigFieldsFragment(c echo.Context) error {
	q := c.QueryParams()
	name := strings.TrimSpace(q.Get("provider"))
	if name == "" {
		name = strings.TrimSpace(q.Get("spec.provider"))
	}
	f, _ := u.newProviderConfigForm(c.Request(), name, q)
	return render(c, http.StatusOK, providerConfigFields(f, c.QueryParam("form")))
}

func ariaBool(b bool) string { return strconv.FormatBool(b) }
