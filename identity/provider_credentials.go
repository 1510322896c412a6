package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// Provider credentials are environment variables handed to tofu for the
// providers of a Provider object (its spec.credentialsRef names them), such as
// OS_PASSWORD for openstack. They are kept sealed in the secrets store under
// "provider-credentials.<name>", never in events; the runner reads them with
// Service.ProviderCredentials.

// ProviderCredentialsKind names provider credentials in answers and audit records.
const ProviderCredentialsKind = "ProviderCredentials"

const secretProviderCredentialsPrefix = "provider-credentials."

// Limits of one set of provider credentials.
const (
	MaxCredentialEntries    = 64
	MaxCredentialValueBytes = 64 << 10
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
	for _, k := range slices.Sorted(maps.Keys(data)) {
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
					k, strings.Join(reservedEnvPrefixes, ", "), strings.Join(slices.Sorted(maps.Keys(reservedEnvNames)), ", "))})
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

// ProviderCredentials returns the environment variables stored under name,
// for the runner to pass to tofu; NotFound when there are none.
func (s *Service) ProviderCredentials(ctx context.Context, name string) (map[string]string, error) {
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
func (s *Service) PutProviderCredentials(ctx context.Context, name string, data map[string]string) (created bool, err error) {
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
func (s *Service) DeleteProviderCredentials(ctx context.Context, name string) error {
	if _, err := s.ProviderCredentials(ctx, name); err != nil {
		return err
	}
	return s.secrets.Delete(ctx, secretProviderCredentialsPrefix+name)
}
