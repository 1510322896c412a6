package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestNormalizeArgs(t *testing.T) {
	app := newRezusctl(cliEnv{}).app()
	tests := []struct{ in, want string }{
		{"get tenants", "get tenants"},
		{"get nodegroups -t acme -o yaml", "get -t acme -o yaml nodegroups"},
		{"get ng workers --server http://x --token t -w", "--server http://x --token t get -w ng workers"},
		{"--context lab get tn -A", "--context lab get -A tn"},
		{"get tn --output=json acme", "get --output=json tn acme"},
		{"config set-context lab --server http://x --tenant acme", "config set-context --server http://x --tenant acme lab"},
		{"apply -f - -t acme", "apply -f - -t acme"},
		{"delete tenant acme --wait --insecure-skip-tls-verify", "--insecure-skip-tls-verify delete --wait tenant acme"},
		{"get -- tenants -weird", "get -- tenants -weird"},
		{"get --generate-bash-completion", "get --generate-bash-completion"},
		{"get ng -t acme --generate-bash-completion", "get -t acme ng --generate-bash-completion"},
		{"help get", "help get"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got := normalizeArgs(app, append([]string{"rezusctl"}, strings.Fields(tt.in)...))
			assert.Equal(t, append([]string{"rezusctl"}, strings.Fields(tt.want)...), got)
		})
	}
}
