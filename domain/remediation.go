package domain

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// RemediationPolicy is a node group's spec.remediation: when RezusCloud
// replaces one of its machines by itself. Absent, it never does.
type RemediationPolicy struct {
	// UnhealthyAfter is how long a machine must be unhealthy without a
	// break (its Talos API unreachable, a service unhealthy, or its Node not
	// Ready) before it is replaced: a Go duration, required.
	UnhealthyAfter string `json:"unhealthyAfter"`
	// MaxUnhealthy stops remediation in the group while more of its machines
	// than this are unhealthy: a count (1) or a percentage of spec.count
	// ("40%", rounded down). Default 1: a partition that makes several
	// machines look dead must not have them destroyed.
	MaxUnhealthy *IntOrPercent `json:"maxUnhealthy,omitempty"`
	// StartupTimeout is how long a new or replaced machine may take to
	// become healthy for the first time; default 10m.
	StartupTimeout string `json:"startupTimeout,omitempty"`
	// WaitForMaintenance marks the group's replacements not urgent: one
	// starts only inside the tenant's maintenance windows (spec.maintenance).
	// Default false: a dead machine is replaced at once.
	WaitForMaintenance bool `json:"waitForMaintenance,omitempty"`
}

// Remediation bounds.
const (
	MinUnhealthyAfter     = time.Second
	MaxUnhealthyAfter     = 24 * time.Hour
	DefaultStartupTimeout = 10 * time.Minute
	MaxStartupTimeout     = 24 * time.Hour
	// MaxRemediationBackoff caps the wait after failed replacements.
	MaxRemediationBackoff = time.Hour
)

// Durations returns unhealthyAfter and startupTimeout (its default when
// absent); Validate has refused what does not parse.
func (p *RemediationPolicy) Durations() (unhealthyAfter, startupTimeout time.Duration) {
	unhealthyAfter, _ = time.ParseDuration(p.UnhealthyAfter)
	startupTimeout = DefaultStartupTimeout
	if p.StartupTimeout != "" {
		startupTimeout, _ = time.ParseDuration(p.StartupTimeout)
	}
	return unhealthyAfter, startupTimeout
}

// MaxUnhealthyOf is how many of count machines may be unhealthy with
// remediation still going on.
func (p *RemediationPolicy) MaxUnhealthyOf(count int) int {
	if p.MaxUnhealthy == nil {
		return 1
	}
	return p.MaxUnhealthy.Of(count)
}

// Validate reports every bad field of a policy at f.
func (p *RemediationPolicy) Validate(f *field.Path) []Cause {
	var causes []Cause
	duration := func(name, v string, lo, hi time.Duration, required bool) {
		if v == "" {
			if required {
				causes = append(causes, Cause{Field: f.Child(name).String(), Type: CauseRequired, Message: "required, a duration such as 5m"})
			}
			return
		}
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			causes = append(causes, Cause{Field: f.Child(name).String(), Type: CauseInvalid, Message: fmt.Sprintf("%q is not a duration such as 5m or 90s", v)})
		case d < lo || d > hi:
			causes = append(causes, Cause{Field: f.Child(name).String(), Type: CauseInvalid, Message: fmt.Sprintf("must be between %s and %s, got %s", lo, hi, v)})
		}
	}
	duration("unhealthyAfter", p.UnhealthyAfter, MinUnhealthyAfter, MaxUnhealthyAfter, true)
	duration("startupTimeout", p.StartupTimeout, MinUnhealthyAfter, MaxStartupTimeout, false)
	if p.MaxUnhealthy != nil {
		causes = append(causes, p.MaxUnhealthy.validate(f.Child("maxUnhealthy"))...)
	}
	return causes
}

// IntOrPercent is a count (3) or a percentage ("40%") in JSON, as
// Kubernetes' intstr for maxUnavailable (which would bring klog into this
// pure package).
type IntOrPercent struct {
	// Value is the count, or the percentage when Percent.
	Value   int
	Percent bool
	// bad is what was given when it was neither.
	bad string
}

// UnmarshalJSON reads 3 or "40%"; anything else is kept for Validate to
// report with its field.
func (v *IntOrPercent) UnmarshalJSON(b []byte) error {
	*v = IntOrPercent{}
	var n int
	if err := json.Unmarshal(b, &n); err == nil {
		v.Value = n
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		v.bad = string(b)
		return nil
	}
	num, ok := strings.CutSuffix(s, "%")
	p, err := strconv.Atoi(num)
	if !ok || err != nil {
		v.bad = strconv.Quote(s)
		return nil
	}
	v.Value, v.Percent = p, true
	return nil
}

// MarshalJSON writes the count as a number and a percentage as "40%".
func (v IntOrPercent) MarshalJSON() ([]byte, error) {
	if v.Percent {
		return json.Marshal(strconv.Itoa(v.Value) + "%")
	}
	return json.Marshal(v.Value)
}

func (v *IntOrPercent) validate(f *field.Path) []Cause {
	switch {
	case v.bad != "":
		return []Cause{{Field: f.String(), Type: CauseInvalid, Message: fmt.Sprintf("%s must be a count (1) or a percentage (\"40%%\")", v.bad)}}
	case v.Percent && (v.Value < 0 || v.Value > 100):
		return []Cause{{Field: f.String(), Type: CauseInvalid, Message: fmt.Sprintf("a percentage must be between 0%% and 100%%, got %d%%", v.Value)}}
	case !v.Percent && (v.Value < 0 || v.Value > MaxNodeGroupCount):
		return []Cause{{Field: f.String(), Type: CauseInvalid, Message: fmt.Sprintf("must be between 0 and %d, got %d", MaxNodeGroupCount, v.Value)}}
	}
	return nil
}

// Of is the count the value stands for out of total (a percentage rounds down).
func (v IntOrPercent) Of(total int) int {
	if v.Percent {
		return total * v.Value / 100
	}
	return v.Value
}
