package main

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/identity"
)

// ssoFlags configure single sign-on through an OpenID provider.
var ssoFlags = []cli.Flag{
	&cli.StringFlag{Name: "oidc-issuer", EnvVars: []string{"REZUSCLOUD_OIDC_ISSUER"}, Usage: "single sign-on: the OpenID provider's issuer URL; off unless set"},
	&cli.StringFlag{Name: "oidc-client-id", EnvVars: []string{"REZUSCLOUD_OIDC_CLIENT_ID"}, Usage: "single sign-on: RezusCloud's client id at the provider"},
	&cli.StringFlag{Name: "oidc-client-secret-file", EnvVars: []string{"REZUSCLOUD_OIDC_CLIENT_SECRET_FILE"}, Usage: "single sign-on: a file holding the client secret (none: a public client, PKCE only)"},
	&cli.StringFlag{Name: "oidc-groups-claim", Value: "groups", EnvVars: []string{"REZUSCLOUD_OIDC_GROUPS_CLAIM"}, Usage: "single sign-on: the claim with the user's groups (ID token, else userinfo)"},
	&cli.StringFlag{Name: "oidc-scopes", Value: "openid,profile,email,offline_access,groups", EnvVars: []string{"REZUSCLOUD_OIDC_SCOPES"}, Usage: "single sign-on: the scopes asked for (comma-separated)"},
	&cli.DurationFlag{Name: "oidc-refresh-interval", Value: 5 * time.Minute, EnvVars: []string{"REZUSCLOUD_OIDC_REFRESH_INTERVAL"}, Usage: "single sign-on: the longest a session goes before the provider is asked again for the user and their groups"},
	&cli.StringFlag{Name: "external-url", EnvVars: []string{"REZUSCLOUD_EXTERNAL_URL"}, Usage: "the URL users reach this server at (single sign-on's callback is <external-url>/api/v1/auth/sso/callback); default http(s)://<listen address>"},
	&cli.BoolFlag{Name: "password-login", Value: true, EnvVars: []string{"REZUSCLOUD_PASSWORD_LOGIN"}, Usage: "let local users log in with a password; --password-login=false leaves single sign-on and --admin-token"},
}

// ssoConfig is single sign-on as the flags give it.
type ssoConfig struct {
	OIDC          identity.OIDCConfig
	SecretFile    string
	ExternalURL   string
	PasswordLogin bool
}

func ssoConfigFrom(c *cli.Context) ssoConfig {
	return ssoConfig{
		OIDC: identity.OIDCConfig{Issuer: c.String("oidc-issuer"), ClientID: c.String("oidc-client-id"),
			GroupsClaim: c.String("oidc-groups-claim"), Scopes: splitList(c.String("oidc-scopes")),
			RefreshInterval: c.Duration("oidc-refresh-interval")},
		SecretFile: c.String("oidc-client-secret-file"), ExternalURL: c.String("external-url"),
		PasswordLogin: c.Bool("password-login"),
	}
}

// oidcConfig completes the provider's settings once the server listens
// (the default external URL is the bound address). ok is false when single
// sign-on is off.
func (s ssoConfig) oidcConfig(addr net.Addr, tls bool) (cfg identity.OIDCConfig, ok bool, err error) {
	if s.OIDC.Issuer == "" {
		if s.OIDC.ClientID != "" || s.SecretFile != "" {
			return cfg, false, fmt.Errorf("--oidc-client-id and --oidc-client-secret-file need --oidc-issuer")
		}
		return cfg, false, nil
	}
	cfg = s.OIDC
	if s.SecretFile != "" {
		b, err := os.ReadFile(s.SecretFile)
		if err != nil {
			return cfg, false, fmt.Errorf("--oidc-client-secret-file: %w", err)
		}
		cfg.ClientSecret = strings.TrimSpace(string(b))
		if cfg.ClientSecret == "" {
			return cfg, false, fmt.Errorf("--oidc-client-secret-file %s is empty", s.SecretFile)
		}
	}
	base := strings.TrimRight(s.ExternalURL, "/")
	if base == "" {
		scheme := "http"
		if tls {
			scheme = "https"
		}
		base = scheme + "://" + addr.String()
	}
	cfg.RedirectURL = base + "/api/v1/auth/sso/callback"
	return cfg, true, cfg.Validate()
}
