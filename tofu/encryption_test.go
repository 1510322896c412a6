package tofu

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/stretchr/testify/require"
)

func TestEncryptionConfigRefusesShortPassphrases(t *testing.T) {
	for _, tc := range []struct {
		name, passphrase string
		ok               bool
	}{
		{"empty", "", false},
		{"15 characters", strings.Repeat("a", 15), false},
		{"16 characters", strings.Repeat("a", 16), true},
		{"8 two-byte characters are 16 bytes but 8 characters", strings.Repeat("é", 8), false},
		{"16 two-byte characters", strings.Repeat("é", 16), true},
		{"not UTF-8", strings.Repeat("\xff", 20), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := EncryptionConfig(tc.passphrase)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}

// parsedEncryption is the parts of an encryption block the tests look at.
type parsedEncryption struct {
	passphrase    string
	methods       map[string]string // "<type>.<name>" -> keys traversal ("" for none)
	stateMethod   string
	stateFallback string
	stateEnforced bool
	planMethod    string
	planFallback  bool
	planEnforced  bool
	// kdf are the key provider's settings besides the passphrase.
	kdf map[string]string
}

func traversalString(t *testing.T, expr hcl.Expression) string {
	t.Helper()
	tr, diags := hcl.AbsTraversalForExpr(expr)
	require.False(t, diags.HasErrors(), diags.Error())
	parts := []string{tr.RootName()}
	for _, step := range tr[1:] {
		parts = append(parts, step.(hcl.TraverseAttr).Name)
	}
	return strings.Join(parts, ".")
}

// parseEncryption reads the config the way OpenTofu does (native HCL syntax)
// into its parts; the literal passphrase is evaluated as a template.
func parseEncryption(t *testing.T, cfg string) parsedEncryption {
	t.Helper()
	f, diags := hclsyntax.ParseConfig([]byte(cfg), "TF_ENCRYPTION", hcl.InitialPos)
	require.False(t, diags.HasErrors(), diags.Error())
	body := f.Body.(*hclsyntax.Body)
	require.Empty(t, body.Attributes)
	out := parsedEncryption{methods: map[string]string{}}
	targets := map[string]bool{}
	for _, blk := range body.Blocks {
		switch blk.Type {
		case "key_provider":
			require.Equal(t, []string{"pbkdf2", "rezus"}, blk.Labels)
			out.kdf = map[string]string{}
			for name, a := range blk.Body.Attributes {
				v, diags := a.Expr.Value(nil)
				require.False(t, diags.HasErrors(), diags.Error())
				if name == "passphrase" {
					out.passphrase = v.AsString()
					continue
				}
				if v.Type().FriendlyName() == "number" {
					out.kdf[name] = v.AsBigFloat().String()
				} else {
					out.kdf[name] = v.AsString()
				}
			}
		case "method":
			require.Len(t, blk.Labels, 2)
			keys := ""
			if a, ok := blk.Body.Attributes["keys"]; ok {
				keys = traversalString(t, a.Expr)
			}
			out.methods[blk.Labels[0]+"."+blk.Labels[1]] = keys
		case "state", "plan":
			targets[blk.Type] = true
			method := traversalString(t, blk.Body.Attributes["method"].Expr)
			enforced := false
			if a, ok := blk.Body.Attributes["enforced"]; ok {
				v, diags := a.Expr.Value(nil)
				require.False(t, diags.HasErrors())
				enforced = v.True()
			}
			fallback := ""
			for _, fb := range blk.Body.Blocks {
				require.Equal(t, "fallback", fb.Type)
				fallback = traversalString(t, fb.Body.Attributes["method"].Expr)
			}
			if blk.Type == "state" {
				out.stateMethod, out.stateFallback, out.stateEnforced = method, fallback, enforced
			} else {
				out.planMethod, out.planFallback, out.planEnforced = method, fallback != "", enforced
			}
		default:
			t.Fatalf("unexpected block %s", blk.Type)
		}
	}
	require.True(t, targets["state"] && targets["plan"])
	return out
}

func TestEncryptionConfig(t *testing.T) {
	for _, passphrase := range []string{
		"correct horse battery staple",
		`quote " and backslash \ and \n literally`,
		"template ${var.x} and %{ if true }directive%{ endif } and $${ and %%{ and $$${x}",
		"ends with a dollar $ and a percent %",
		"newline\nand tab\tand CR\r and NUL-free control \x01 and DEL \x7f",
		"ünïcödé pässphräsé ✓ 🔑",
	} {
		t.Run(passphrase, func(t *testing.T) {
			cfg, err := EncryptionConfig(passphrase)
			require.NoError(t, err)
			p := parseEncryption(t, cfg)
			require.Equal(t, passphrase, p.passphrase, "the passphrase survives quoting exactly")
			require.Empty(t, p.kdf, "a passphrase (chosen by a person) gets OpenTofu's default stretching")
			require.Equal(t, map[string]string{
				"aes_gcm.rezus":       "key_provider.pbkdf2.rezus",
				"unencrypted.migrate": "",
			}, p.methods)
			require.Equal(t, "method.aes_gcm.rezus", p.stateMethod, "state is written encrypted")
			require.Equal(t, "method.unencrypted.migrate", p.stateFallback, "plain state is read, to migrate")
			require.False(t, p.stateEnforced, "tofu refuses enforced beside an unencrypted fallback")
			require.Equal(t, "method.aes_gcm.rezus", p.planMethod)
			require.True(t, p.planEnforced)
			require.False(t, p.planFallback)
		})
	}
}

// TestKeyEncryptionConfig: a tenant's generated key (32 random bytes) gets
// the least PBKDF2 work OpenTofu accepts, which is what every tofu command
// spends on each state read and write (issue 49).
func TestKeyEncryptionConfig(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	cfg, err := KeyEncryptionConfig(key)
	require.NoError(t, err)
	p := parseEncryption(t, cfg)
	require.Equal(t, hex.EncodeToString(key), p.passphrase)
	require.Equal(t, map[string]string{"iterations": "200000", "hash_function": "sha256"}, p.kdf)
	require.Equal(t, "method.aes_gcm.rezus", p.stateMethod)
	require.True(t, p.planEnforced)
	_, err = KeyEncryptionConfig(key[:8])
	require.Error(t, err)
}
