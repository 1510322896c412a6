package identity

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestCheckLoopback(t *testing.T) {
	for _, tc := range []struct {
		redirect string
		ok       bool
	}{
		{"http://127.0.0.1:38123/callback", true},
		{"http://[::1]:38123/callback", true},
		{"http://localhost:9/cb", true},
		{"http://127.0.0.1/callback", false},           // no port: not a listener of its own
		{"https://127.0.0.1:38123/callback", false},    // loopback is plain http
		{"http://evil.example:80/callback", false},     // not loopback
		{"http://127.0.0.1.evil.example:80/cb", false}, // a name that starts like it
		{"http://user@127.0.0.1:9/cb", false},          // credentials in the URL
		{"http://127.0.0.1:9/" + strings.Repeat("a", 600), false},
		{"javascript:alert(1)", false},
		{"", false},
	} {
		t.Run(tc.redirect, func(t *testing.T) {
			err := checkLoopback(tc.redirect)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.Equal(t, domain.ReasonBadRequest, domain.ReasonOf(err), "%v", err)
		})
	}
}

func TestReadGroups(t *testing.T) {
	long := strings.Repeat("g", domain.MaxGroupNameLength+1)
	many := make([]string, domain.MaxGroupsPerIdentity+3)
	for i := range many {
		many[i] = "g" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + strings.Repeat("y", i/26)
	}
	manyJSON, _ := json.Marshal(many)
	for _, tc := range []struct {
		name    string
		claim   string
		groups  []string
		dropped int
	}{
		{"absent", ``, nil, 0},
		{"a list", `["platform","sre"]`, []string{"platform", "sre"}, 0},
		{"one string", `"platform"`, []string{"platform"}, 0},
		{"duplicates kept once", `["a","a","b"]`, []string{"a", "b"}, 0},
		{"unusable names dropped", `["", "ok", "` + long + `", "a\u0000b"]`, []string{"ok"}, 3},
		{"not strings", `[1,2]`, nil, 1},
		{"an object", `{"a":1}`, nil, 1},
		{"too many", string(manyJSON), many[:domain.MaxGroupsPerIdentity], 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			groups, dropped := readGroups(json.RawMessage(tc.claim))
			require.Equal(t, tc.groups, groups)
			require.Equal(t, tc.dropped, dropped)
		})
	}
}

func TestUserNameFrom(t *testing.T) {
	for _, tc := range []struct {
		claims idClaims
		want   string
	}{
		{idClaims{PreferredUsername: "alice"}, "alice"},
		{idClaims{PreferredUsername: "Alice.Smith@Corp"}, "alice-smith-corp"},
		{idClaims{Email: "bob.jones@example.com"}, "bob-jones"},
		{idClaims{PreferredUsername: "--__--"}, "sso-user"},
		{idClaims{}, "sso-user"},
		{idClaims{PreferredUsername: "Ünïcode"}, "n-code"},
		{idClaims{PreferredUsername: strings.Repeat("x", 80)}, strings.Repeat("x", 63)},
	} {
		t.Run(tc.want, func(t *testing.T) {
			got := userNameFrom(tc.claims)
			require.Equal(t, tc.want, got)
			require.Nil(t, domain.ValidateName(got, ""), "a valid user name")
		})
	}
}

func TestNextCheck(t *testing.T) {
	o := &sso{cfg: OIDCConfig{RefreshInterval: 5 * time.Minute}}
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		idExpiry time.Time
		want     time.Time
	}{
		{"the interval when the token lasts longer", now.Add(time.Hour), now.Add(5 * time.Minute)},
		{"the token's expiry when sooner", now.Add(time.Minute), now.Add(time.Minute)},
		{"the interval when the token says nothing", time.Time{}, now.Add(5 * time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, o.nextCheck(now, tc.idExpiry))
		})
	}
}

func TestReadState(t *testing.T) {
	o := &sso{stateKey: []byte("0123456789abcdef0123456789abcdef")}
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	sign := func(st loginState) string {
		raw, _ := json.Marshal(st)
		body := base64.RawURLEncoding.EncodeToString(raw)
		return body + "." + base64.RawURLEncoding.EncodeToString(o.stateMAC(body))
	}
	good := loginState{State: "s1", Nonce: "n1", Verifier: "v1", Expires: now.Add(time.Minute).Unix()}
	other := &sso{stateKey: []byte("another key, another server......")}
	forged := func() string {
		raw, _ := json.Marshal(good)
		body := base64.RawURLEncoding.EncodeToString(raw)
		return body + "." + base64.RawURLEncoding.EncodeToString(other.stateMAC(body))
	}()
	for _, tc := range []struct {
		name, cookie, state string
		ok                  bool
	}{
		{"its own state", sign(good), "s1", true},
		{"another state", sign(good), "s2", false},
		{"an empty state", sign(loginState{Expires: good.Expires}), "", false},
		{"expired", sign(loginState{State: "s1", Expires: now.Unix()}), "s1", false},
		{"signed by another key", forged, "s1", false},
		{"no signature", strings.Split(sign(good), ".")[0], "s1", false},
		{"garbage", "not.a-cookie", "s1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := o.readState(now, tc.cookie, tc.state)
			if !tc.ok {
				require.Equal(t, domain.ReasonUnauthorized, domain.ReasonOf(err), "%v", err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, good, st)
		})
	}
}

func TestAddQuery(t *testing.T) {
	got := addQuery("http://127.0.0.1:9/cb?keep=1", url.Values{"code": {"c&d"}, "state": {"s"}})
	u, err := url.Parse(got)
	require.NoError(t, err)
	require.Equal(t, "1", u.Query().Get("keep"))
	require.Equal(t, "c&d", u.Query().Get("code"))
	require.Equal(t, "s", u.Query().Get("state"))
}

func TestOIDCConfigValidate(t *testing.T) {
	good := OIDCConfig{Issuer: "https://idp.example.com/realms/ops", ClientID: "rezus", RedirectURL: "https://rezus.example.com/api/v1/auth/sso/callback"}
	require.NoError(t, good.Validate())
	for name, mutate := range map[string]func(*OIDCConfig){
		"issuer not a URL":      func(c *OIDCConfig) { c.Issuer = "idp.example.com" },
		"issuer not http(s)":    func(c *OIDCConfig) { c.Issuer = "ftp://idp.example.com" },
		"no client id":          func(c *OIDCConfig) { c.ClientID = "" },
		"relative redirect URL": func(c *OIDCConfig) { c.RedirectURL = "/api/v1/auth/sso/callback" },
	} {
		t.Run(name, func(t *testing.T) {
			c := good
			mutate(&c)
			require.Error(t, c.Validate())
		})
	}
}
