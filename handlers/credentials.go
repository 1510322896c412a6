package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
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
// with IdentityService.ProviderCredentials.

// ProviderCredentialsKind names provider credentials in answers and audit records.
const ProviderCredentialsKind = "ProviderCredentials"

const secretProviderCredentialsPrefix = "provider-credentials."

// Limits of one set of provider credentials.
const (
	MaxCredentialEntries    = 64
	MaxCredentialValueBytes = 64 << 10
	// maxCredentialsBody leaves room for JSON escaping of full-size values.
	maxCredentialsBody = 2 * MaxCredentialEntries * (MaxCredentialValueBytes + 256)
)

var envNamePattern = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)

// reservedEnvNames are variables the runner sets or that change how tofu or
// the process runs: a credential must not replace them.
var reservedEnvNames = map[string]bool{"PATH": true, "HOME": true, "USER": true, "SHELL": true, "PWD": true, "TMPDIR": true}

// reservedEnvPrefixes: TF_* configures tofu itself (TF_CLI_CONFIG_FILE,
// TF_ENCRYPTION, TF_HTTP_PASSWORD, TF_VAR_*, …), LD_* and DYLD_* change what
// code the process loads, REZUSCLOUD_* is the server's own configuration.
var reservedEnvPrefixes = []string{"TF_", "LD_", "DYLD_", "REZUSCLOUD_"}

// validateCredentialData reports every bad entry of a credentials body.
func validateCredentialData(data map[string]string) []domain.Cause {
	var causes []domain.Cause
	if len(data) == 0 {
		causes = append(causes, domain.Cause{Field: "data", Type: domain.CauseRequired, Message: "at least one variable is required"})
	}
	if len(data) > MaxCredentialEntries {
		causes = append(causes, domain.Cause{Field: "data", Type: domain.CauseTooLong,
			Message: fmt.Sprintf("at most %d variables, got %d", MaxCredentialEntries, len(data))})
	}
	names := make([]string, 0, len(data))
	for k := range data {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		f := "data[" + k + "]"
		if len(k) > 256 {
			f = "data[" + k[:256] + "…]"
		}
		switch {
		case !envNamePattern.MatchString(k):
			causes = append(causes, domain.Cause{Field: f, Type: domain.CauseInvalid,
				Message: "an environment variable name must match [A-Z_][A-Z0-9_]*"})
		case reservedEnvNames[k] || hasAnyPrefix(k, reservedEnvPrefixes):
			causes = append(causes, domain.Cause{Field: f, Type: domain.CauseForbidden,
				Message: fmt.Sprintf("%s is set by the runner or changes how tofu runs; names starting with %s and %s are refused",
					k, strings.Join(reservedEnvPrefixes, ", "), strings.Join(sortedKeys(reservedEnvNames), ", "))})
		}
		if len(data[k]) > MaxCredentialValueBytes {
			causes = append(causes, domain.Cause{Field: f, Type: domain.CauseTooLong,
				Message: fmt.Sprintf("must be no more than %d bytes", MaxCredentialValueBytes)})
		}
		if strings.ContainsRune(data[k], 0) {
			causes = append(causes, domain.Cause{Field: f, Type: domain.CauseInvalid, Message: "must not contain a NUL byte"})
		}
	}
	return causes
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ProviderCredentials returns the environment variables stored under name,
// for the runner to pass to tofu; NotFound when there are none.
func (s *IdentityService) ProviderCredentials(ctx context.Context, name string) (map[string]string, error) {
	if causes := domain.ValidateName(name, "credentialsRef.name"); causes != nil {
		return nil, domain.NewBadRequest("bad provider credentials name: "+causes[0].Message, causes...)
	}
	raw, err := s.secrets.Get(ctx, secretProviderCredentialsPrefix+name)
	if errors.Is(err, eventstore.ErrSecretNotFound) {
		return nil, domain.NewNotFound(ProviderCredentialsKind, name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading provider credentials %s: %w", name, err)
	}
	data := map[string]string{}
	if err := json.Unmarshal(raw, &data); err != nil {
		return nil, fmt.Errorf("decoding provider credentials %s: %w", name, err)
	}
	return data, nil
}

// PutProviderCredentials validates and stores data under name, replacing
// what was there; it reports whether the name was new.
func (s *IdentityService) PutProviderCredentials(ctx context.Context, name string, data map[string]string) (created bool, err error) {
	if causes := append(domain.ValidateName(name, "metadata.name"), validateCredentialData(data)...); len(causes) > 0 {
		return false, domain.NewInvalid(ProviderCredentialsKind, name, causes)
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return false, err
	}
	key := secretProviderCredentialsPrefix + name
	created, err = s.secrets.Create(ctx, key, raw)
	if err != nil || created {
		return created, err
	}
	return false, s.secrets.Put(ctx, key, raw)
}

// DeleteProviderCredentials removes the credentials under name; NotFound when there are none.
func (s *IdentityService) DeleteProviderCredentials(ctx context.Context, name string) error {
	if _, err := s.ProviderCredentials(ctx, name); err != nil {
		return err
	}
	return s.secrets.Delete(ctx, secretProviderCredentialsPrefix+name)
}

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
	v := credentialsView{APIVersion: domain.APIVersion, Kind: ProviderCredentialsKind, Keys: sortedKeys(data)}
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
	c.Set(auditTargetKey, auditTarget{kind: ProviderCredentialsKind, name: name})
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
