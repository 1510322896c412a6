package domain

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/Masterminds/semver/v3"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxNameLength is the longest object name: a DNS-1123 label, because names are
// NATS subject tokens and hostnames.
const MaxNameLength = validation.DNS1123LabelMaxLength

// ValidateName checks an object name: a DNS-1123 label (no dots, so it is one
// subject token).
func ValidateName(name, field string) []Cause {
	switch {
	case name == "":
		return []Cause{{Field: field, Type: CauseRequired, Message: "name is required"}}
	case len(name) > MaxNameLength:
		return []Cause{{Field: field, Type: CauseTooLong, Message: fmt.Sprintf("must be no more than %d characters", MaxNameLength)}}
	case len(validation.IsDNS1123Label(name)) > 0:
		return []Cause{{Field: field, Type: CauseInvalid, Message: fmt.Sprintf("%q must be a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a letter or digit", name)}}
	}
	return nil
}

func validSubdomain(s string) bool { return len(validation.IsDNS1123Subdomain(s)) == 0 }

// Version is a parsed semantic version.
type Version struct {
	Major, Minor, Patch int
	Pre                 string
}

// ParseVersion parses "v1.2.3" or "1.2.3" (with optional pre-release and
// build) as strict SemVer 2.0.
func ParseVersion(s string) (Version, bool) {
	v, err := semver.StrictNewVersion(strings.TrimPrefix(s, "v"))
	if err != nil {
		return Version{}, false
	}
	return Version{Major: int(v.Major()), Minor: int(v.Minor()), Patch: int(v.Patch()), Pre: v.Prerelease()}, true
}

// canonicalVersion returns s with a leading "v", the form Talos and Kubernetes print.
func canonicalVersion(s string) string {
	if strings.HasPrefix(s, "v") {
		return s
	}
	return "v" + s
}

func validateVersion(s string, p *field.Path) []Cause {
	if _, ok := ParseVersion(s); !ok {
		return []Cause{{Field: p.String(), Type: CauseInvalid, Message: fmt.Sprintf("%q is not a semantic version (e.g. v1.13.0)", s)}}
	}
	return nil
}

func oneOf(v string, p *field.Path, allowed ...string) []Cause {
	if slices.Contains(allowed, v) {
		return nil
	}
	if v == "" {
		return []Cause{{Field: p.String(), Type: CauseRequired, Message: "must be one of " + strings.Join(allowed, ", ")}}
	}
	return []Cause{{Field: p.String(), Type: CauseNotSupported, Message: fmt.Sprintf("%q is not supported: must be one of %s", v, strings.Join(allowed, ", "))}}
}

// parsePrefixes validates a list of CIDRs; it reports unparsable ones, ones that
// are not network addresses, and duplicates of the same family.
func parsePrefixes(list []string, fp *field.Path) ([]netip.Prefix, []Cause) {
	var out []netip.Prefix
	var causes []Cause
	families := map[bool]bool{}
	for i, s := range list {
		f := fp.Index(i).String()
		p, err := netip.ParsePrefix(s)
		if err != nil {
			causes = append(causes, Cause{Field: f, Type: CauseInvalid, Message: fmt.Sprintf("%q is not a valid CIDR", s)})
			continue
		}
		if p.Masked() != p {
			causes = append(causes, Cause{Field: f, Type: CauseInvalid, Message: fmt.Sprintf("%q is not a network address; did you mean %s", s, p.Masked())})
			continue
		}
		if families[p.Addr().Is4()] {
			causes = append(causes, Cause{Field: f, Type: CauseDuplicate, Message: "at most one IPv4 and one IPv6 CIDR"})
			continue
		}
		families[p.Addr().Is4()] = true
		out = append(out, p)
	}
	return out, causes
}

// canonicalObject checks that raw is a JSON object (or empty) and re-encodes it
// with sorted keys, so equal objects are equal bytes.
func canonicalObject(raw json.RawMessage, p *field.Path) (json.RawMessage, []Cause) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, []Cause{{Field: p.String(), Type: CauseTypeInvalid, Message: "must be a JSON object"}}
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, []Cause{{Field: p.String(), Type: CauseInvalid, Message: err.Error()}}
	}
	return out, nil
}

// defaultable is implemented by spec and status types. Validate's root names
// the field the value sits under ("spec", "status"); beneath it each check
// builds its paths from field.NewPath(root), so causes read spec.x[0].y.
type defaultable interface {
	Default()
	Validate(root string) []Cause
}

// normalizeAs strictly decodes raw into T, fills defaults, validates and
// re-encodes: the canonical form stored in events.
func normalizeAs[T any, P interface {
	*T
	defaultable
}](raw json.RawMessage, root string) (json.RawMessage, []Cause) {
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage("{}")
	}
	var v T
	if causes := DecodeStrict(raw, &v, root); len(causes) > 0 {
		return nil, causes
	}
	P(&v).Default()
	if causes := P(&v).Validate(root); len(causes) > 0 {
		return nil, causes
	}
	out, err := json.Marshal(&v)
	if err != nil {
		return nil, []Cause{{Field: root, Type: CauseInvalid, Message: err.Error()}}
	}
	return out, nil
}

// ValidateFinalizers checks finalizer names: qualified names, unique, at most 32.
func ValidateFinalizers(fins []string, p *field.Path) []Cause {
	var causes []Cause
	if len(fins) > 32 {
		causes = append(causes, Cause{Field: p.String(), Type: CauseTooLong, Message: "at most 32 finalizers"})
	}
	seen := map[string]bool{}
	for i, f := range fins {
		fp := p.Index(i).String()
		if c := ValidateLabels(map[string]string{f: ""}, p); len(c) > 0 || f == "" {
			causes = append(causes, Cause{Field: fp, Type: CauseInvalid, Message: fmt.Sprintf("%q is not a qualified name (e.g. rezuscloud.io/cleanup)", f)})
		}
		if seen[f] {
			causes = append(causes, Cause{Field: fp, Type: CauseDuplicate, Message: fmt.Sprintf("duplicate finalizer %q", f)})
		}
		seen[f] = true
	}
	return causes
}
