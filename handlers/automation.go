package handlers

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// AutomationIssuer issues and revokes NATS credentials for external
// automation (eventstore.Automation). nil in Deps means the server has none to
// give: it runs on an external NATS cluster (--nats-url) or as a node of an
// embedded cluster (--cluster-listen).
type AutomationIssuer interface {
	Issue(ctx context.Context, name, creator string) (eventstore.IssuedAutomationCredential, error)
	Get(ctx context.Context, name string) (eventstore.AutomationCredential, error)
	List(ctx context.Context) ([]eventstore.AutomationCredential, error)
	Revoke(ctx context.Context, name string) (eventstore.AutomationCredential, error)
}

// automationCredential is the API view of automation credentials: Kubernetes
// shaped, without secrets.
type automationCredential struct {
	APIVersion string                     `json:"apiVersion"`
	Kind       string                     `json:"kind"`
	Metadata   domain.ObjectMeta          `json:"metadata"`
	Status     automationCredentialStatus `json:"status"`
	// Creds is the .creds file, in the create answer only.
	Creds string `json:"creds,omitempty"`
	// NATSURL is the embedded server's client URL, in the create answer
	// only, when it listens (--nats-listen).
	NATSURL string `json:"natsURL,omitempty"`
}

type automationCredentialStatus struct {
	// PublicKey is the NATS user's public key: what shows in the server's
	// connection list and what revocation names.
	PublicKey string `json:"publicKey"`
	Creator   string `json:"creator"`
}

type automationCredentialList struct {
	APIVersion string                 `json:"apiVersion"`
	Kind       string                 `json:"kind"`
	Metadata   domain.ListMeta        `json:"metadata"`
	Items      []automationCredential `json:"items"`
}

func automationView(c eventstore.AutomationCredential) automationCredential {
	created := c.Created
	return automationCredential{APIVersion: domain.APIVersion, Kind: eventstore.AutomationCredentialKind,
		Metadata: domain.ObjectMeta{Name: c.Name, CreationTimestamp: &created},
		Status:   automationCredentialStatus{PublicKey: c.PublicKey, Creator: c.Creator}}
}

// automationRoutes registers /api/v1/automation-credentials (admins only; see requiredPermission).
func (a *API) automationRoutes(g *authed) {
	g.GET("/automation-credentials", a.listAutomationCredentials)
	g.POST("/automation-credentials", a.createAutomationCredential)
	g.GET("/automation-credentials/:name", a.getAutomationCredential)
	g.DELETE("/automation-credentials/:name", a.deleteAutomationCredential)
}

// requireAutomation refuses when this server issues no NATS credentials.
func (a *API) requireAutomation() error {
	if a.automation == nil {
		return domain.NewBadRequest("this server issues no NATS credentials: it runs on an external NATS cluster (--nats-url), " +
			"whose operator issues credentials for automation (for example with nsc), or as a node of an embedded cluster " +
			"(--cluster-listen), which does not issue them yet; see docs/events.md and docs/operations.md")
	}
	return nil
}

type automationCreateRequest struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
}

// createAutomationCredential issues credentials and answers them once: the
// .creds content (user JWT and seed) is not kept by the server.
func (a *API) createAutomationCredential(c echo.Context) error {
	if err := a.requireAutomation(); err != nil {
		return err
	}
	body, err := a.readBody(c, "application/json")
	if err != nil {
		return err
	}
	var req automationCreateRequest
	if causes := domain.DecodeStrict(body, &req, ""); causes != nil {
		return domain.NewBadRequest("the automation credentials request is not valid", causes...)
	}
	name := req.Metadata.Name
	c.Set(auditTargetKey, auditTarget{kind: eventstore.AutomationCredentialKind, name: name})
	var causes []domain.Cause
	if req.APIVersion != "" && req.APIVersion != domain.APIVersion {
		causes = append(causes, domain.Cause{Field: "apiVersion", Type: domain.CauseNotSupported, Message: "must be " + domain.APIVersion})
	}
	if req.Kind != "" && req.Kind != eventstore.AutomationCredentialKind {
		causes = append(causes, domain.Cause{Field: "kind", Type: domain.CauseNotSupported, Message: "must be " + eventstore.AutomationCredentialKind})
	}
	causes = append(causes, domain.ValidateName(name, "metadata.name")...)
	if len(causes) > 0 {
		return domain.NewInvalid(eventstore.AutomationCredentialKind, name, causes)
	}
	issued, err := a.automation.Issue(c.Request().Context(), name, identityOf(c).Name)
	if err != nil {
		return err
	}
	out := automationView(issued.AutomationCredential)
	out.Creds, out.NATSURL = string(issued.Creds), issued.URL
	if issued.URL == "" {
		c.Response().Header().Set("Warning", `299 - "the embedded NATS server has no client listener: start rezuscloud serve with --nats-listen to use these credentials"`)
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusCreated, out)
}

func (a *API) listAutomationCredentials(c echo.Context) error {
	if err := a.requireAutomation(); err != nil {
		return err
	}
	recs, err := a.automation.List(c.Request().Context())
	if err != nil {
		return err
	}
	out := automationCredentialList{APIVersion: domain.APIVersion, Kind: eventstore.AutomationCredentialKind + "List",
		Items: make([]automationCredential, 0, len(recs))}
	for _, r := range recs {
		out.Items = append(out.Items, automationView(r))
	}
	return c.JSON(http.StatusOK, out)
}

func (a *API) automationName(c echo.Context) (string, error) {
	if err := a.requireAutomation(); err != nil {
		return "", err
	}
	name := c.Param("name")
	if causes := domain.ValidateName(name, "metadata.name"); causes != nil {
		return "", domain.NewBadRequest("invalid name in the URL", causes...)
	}
	return name, nil
}

func (a *API) getAutomationCredential(c echo.Context) error {
	name, err := a.automationName(c)
	if err != nil {
		return err
	}
	rec, err := a.automation.Get(c.Request().Context(), name)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, automationView(rec))
}

// deleteAutomationCredential revokes credentials: the NATS server disconnects
// a client using them at once and refuses them from then on.
func (a *API) deleteAutomationCredential(c echo.Context) error {
	c.Set(auditTargetKey, auditTarget{kind: eventstore.AutomationCredentialKind, name: c.Param("name")})
	name, err := a.automationName(c)
	if err != nil {
		return err
	}
	rec, err := a.automation.Revoke(c.Request().Context(), name)
	if err != nil {
		return err
	}
	out := automationView(rec)
	now := a.cfg.Now().UTC().Truncate(time.Millisecond)
	out.Metadata.DeletionTimestamp = &now
	return c.JSON(http.StatusOK, out)
}
