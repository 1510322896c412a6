package handlers

import (
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/identity"
)

// Provider credentials are environment variables handed to tofu for the
// providers of a Provider object (its spec.credentialsRef names them), such as
// OS_PASSWORD for openstack. Admins manage them:
//
//	PUT    /api/v1/credentials/{name}  body {"data":{"ENV_NAME":"value", …}}: create or replace
//	GET    /api/v1/credentials/{name}  the names of the variables, never the values
//	DELETE /api/v1/credentials/{name}
//
// They are kept sealed in the secrets store under "provider-credentials.<name>",
// never in events, and audited without their values. The runner reads them
// with identity.Service.ProviderCredentials.

// maxCredentialsBody leaves room for JSON escaping of full-size values.
const maxCredentialsBody = 2 * identity.MaxCredentialEntries * (identity.MaxCredentialValueBytes + 256)

// credentialsView is what the API shows of provider credentials: names only.
type credentialsView struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	// Keys are the variable names, sorted; the values are never shown.
	Keys []string `json:"keys"`
}

func newCredentialsView(name string, data map[string]string) credentialsView {
	v := credentialsView{APIVersion: domain.APIVersion, Kind: identity.ProviderCredentialsKind, Keys: slices.Sorted(maps.Keys(data))}
	v.Metadata.Name = name
	return v
}

func (a *API) credentialRoutes(g *authed) {
	g.PUT("/credentials/:name", a.putCredentials)
	g.GET("/credentials/:name", a.getCredentials)
	g.DELETE("/credentials/:name", a.deleteCredentials)
}

// credentialsName reads the name of a credentials route and names the audit target.
func (a *API) credentialsName(c echo.Context) (string, error) {
	name := c.Param("name")
	c.Set(auditTargetKey, auditTarget{kind: identity.ProviderCredentialsKind, name: name})
	if a.identity == nil {
		return "", &domain.Error{Reason: domain.ReasonServiceUnavailable, Message: "provider credentials need the identity service's secrets store"}
	}
	if causes := domain.ValidateName(name, "metadata.name"); causes != nil {
		return "", domain.NewBadRequest("invalid name in the URL", causes...)
	}
	return name, nil
}

func (a *API) putCredentials(c echo.Context) error {
	name, err := a.credentialsName(c)
	if err != nil {
		return err
	}
	if ct := c.Request().Header.Get(echo.HeaderContentType); ct != "" && !strings.HasPrefix(ct, echo.MIMEApplicationJSON) {
		return &domain.Error{Reason: domain.ReasonUnsupportedMediaType, Message: "the body must be application/json"}
	}
	raw, err := readLimited(c, maxCredentialsBody, "a provider credentials body")
	if err != nil {
		return err
	}
	var body struct {
		Data map[string]string `json:"data"`
	}
	if causes := domain.DecodeStrict(raw, &body, ""); causes != nil {
		return domain.NewBadRequest("the body must be {\"data\":{\"ENV_NAME\":\"value\"}}: "+causeSummary(causes), causes...)
	}
	created, err := a.identity.PutProviderCredentials(c.Request().Context(), name, body.Data)
	if err != nil {
		return err
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	return c.JSON(code, newCredentialsView(name, body.Data))
}

func (a *API) getCredentials(c echo.Context) error {
	name, err := a.credentialsName(c)
	if err != nil {
		return err
	}
	data, err := a.identity.ProviderCredentials(c.Request().Context(), name)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newCredentialsView(name, data))
}

func (a *API) deleteCredentials(c echo.Context) error {
	name, err := a.credentialsName(c)
	if err != nil {
		return err
	}
	data, err := a.identity.ProviderCredentials(c.Request().Context(), name)
	if err != nil {
		return err
	}
	if err := a.identity.DeleteProviderCredentials(c.Request().Context(), name); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newCredentialsView(name, data))
}
