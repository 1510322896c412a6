package domain

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxLabelCount is the most labels one object may carry. Kubernetes has no
// such limit; it is our own, so that label indexes and selector matching stay
// cheap and an object cannot be bloated through its metadata.
const MaxLabelCount = 64

// MaxAnnotationsTotalSize is the most bytes the keys and values of an
// object's annotations may add up to, the same budget Kubernetes allows.
const MaxAnnotationsTotalSize = 256 << 10

// The limits and patterns of label keys and values, as Kubernetes has them,
// so that labels written here can be copied to Kubernetes objects unchanged.
const (
	labelNameMaxLength   = 63
	labelPrefixMaxLength = validation.DNS1123SubdomainMaxLength
	labelValueMaxLength  = validation.LabelValueMaxLength
	labelNameFmt         = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
	labelPrefixLabelFmt  = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
	labelPrefixFmt       = labelPrefixLabelFmt + "(\\." + labelPrefixLabelFmt + ")*"
)

var (
	labelNameRE   = regexp.MustCompile("^" + labelNameFmt + "$")
	labelPrefixRE = regexp.MustCompile("^" + labelPrefixFmt + "$")
	labelValueRE  = regexp.MustCompile("^(" + labelNameFmt + ")?$")
)

// labelProblem is one thing wrong with a label key or value; tooLong tells a
// length problem apart so that the cause can be typed as Kubernetes does.
type labelProblem struct {
	msg     string
	tooLong bool
}

// labelKeyProblems checks a key as Kubernetes' IsQualifiedName does: an
// optional DNS-1123 subdomain prefix and a slash, then a name.
func labelKeyProblems(key string) []labelProblem {
	var probs []labelProblem
	name := key
	if prefix, rest, found := strings.Cut(key, "/"); found {
		if strings.Contains(rest, "/") {
			return []labelProblem{{msg: "must be a name with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName'), and may contain at most one '/'"}}
		}
		name = rest
		switch {
		case prefix == "":
			probs = append(probs, labelProblem{msg: "prefix part must not be empty"})
		case len(prefix) > labelPrefixMaxLength:
			probs = append(probs, labelProblem{msg: fmt.Sprintf("prefix part must be no more than %d characters", labelPrefixMaxLength), tooLong: true})
		}
		if prefix != "" && !labelPrefixRE.MatchString(prefix) {
			probs = append(probs, labelProblem{msg: "prefix part must be a lowercase DNS-1123 subdomain: lowercase alphanumeric characters, '-' or '.', starting and ending with an alphanumeric character (e.g. 'example.com')"})
		}
	}
	switch {
	case name == "":
		return append(probs, labelProblem{msg: "name part must not be empty"})
	case len(name) > labelNameMaxLength:
		probs = append(probs, labelProblem{msg: fmt.Sprintf("name part must be no more than %d characters", labelNameMaxLength), tooLong: true})
	}
	if !labelNameRE.MatchString(name) {
		probs = append(probs, labelProblem{msg: "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName', 'my.name' or '123-abc')"})
	}
	return probs
}

// labelValueProblems checks a value as Kubernetes' IsValidLabelValue does.
func labelValueProblems(value string) []labelProblem {
	var probs []labelProblem
	if len(value) > labelValueMaxLength {
		probs = append(probs, labelProblem{msg: fmt.Sprintf("must be no more than %d characters", labelValueMaxLength), tooLong: true})
	}
	if !labelValueRE.MatchString(value) {
		probs = append(probs, labelProblem{msg: "must be empty or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue', 'my_value' or '12345')"})
	}
	return probs
}

// labelCause folds the problems of one key or value into a single cause, typed
// TooLong only when length is all that is wrong, so that a client fixing the
// field sees every problem at once.
func labelCause(f *field.Path, what string, probs []labelProblem) Cause {
	typ := CauseTooLong
	for _, p := range probs {
		if !p.tooLong {
			typ = CauseInvalid
		}
	}
	return Cause{Field: f.String(), Type: typ, Message: labelMessage(what, probs)}
}

// labelMessage is labelCause's message, for callers that report no field.
func labelMessage(what string, probs []labelProblem) string {
	msgs := make([]string, len(probs))
	for i, p := range probs {
		msgs[i] = p.msg
	}
	return "invalid " + what + ": " + strings.Join(msgs, "; ")
}

// ValidateLabels checks labels by the Kubernetes rules for keys and values and
// reports every bad entry at field[key], e.g. "metadata.labels[app]". It also
// enforces MaxLabelCount, which is our own limit, not a Kubernetes one; that
// cause names field itself.
func ValidateLabels(labels map[string]string, p *field.Path) []Cause {
	var causes []Cause
	if len(labels) > MaxLabelCount {
		causes = append(causes, Cause{Field: p.String(), Type: CauseTooLong,
			Message: fmt.Sprintf("must have at most %d labels, got %d", MaxLabelCount, len(labels))})
	}
	// Sorted, so that causes come out deterministically.
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		f := p.Key(k)
		if probs := labelKeyProblems(k); len(probs) > 0 {
			causes = append(causes, labelCause(f, "key", probs))
		}
		if probs := labelValueProblems(labels[k]); len(probs) > 0 {
			causes = append(causes, labelCause(f, "value", probs))
		}
	}
	return causes
}

// ValidateAnnotations checks that annotation keys follow the label key rules
// and that keys and values together stay within MaxAnnotationsTotalSize, as
// Kubernetes requires; values are free-form. Bad keys are reported at
// field[key], the size at field itself.
func ValidateAnnotations(annotations map[string]string, p *field.Path) []Cause {
	var causes []Cause
	total := 0
	for _, k := range slices.Sorted(maps.Keys(annotations)) {
		total += len(k) + len(annotations[k])
		if probs := labelKeyProblems(k); len(probs) > 0 {
			causes = append(causes, labelCause(p.Key(k), "key", probs))
		}
	}
	if total > MaxAnnotationsTotalSize {
		causes = append(causes, Cause{Field: p.String(), Type: CauseTooLong,
			Message: fmt.Sprintf("total size of keys and values must be at most %d bytes, got %d", MaxAnnotationsTotalSize, total)})
	}
	return causes
}

// LabelPairs holds labels as key, value, key, value, ... sorted by key: a
// fraction of a map's memory, for read models that keep many objects' labels.
type LabelPairs []string

// NewLabelPairs copies a label map into pairs.
func NewLabelPairs(m map[string]string) LabelPairs {
	if len(m) == 0 {
		return nil
	}
	p := make(LabelPairs, 0, 2*len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		p = append(p, k, m[k])
	}
	return p
}

// Lookup returns the value of a label and whether it is set.
func (p LabelPairs) Lookup(key string) (string, bool) {
	for i := 0; i+1 < len(p); i += 2 {
		if p[i] == key {
			return p[i+1], true
		}
	}
	return "", false
}

// Has reports whether a label is set.
func (p LabelPairs) Has(key string) bool {
	_, ok := p.Lookup(key)
	return ok
}

// Get returns the value of a label, "" when it is not set.
func (p LabelPairs) Get(key string) string {
	v, _ := p.Lookup(key)
	return v
}
