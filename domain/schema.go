package domain

// Storage schema levels: what a stored record's shape is, so that every
// release reads what every earlier one wrote and writes only what every
// running replica reads (docs/storage.md). Conversions are pure, on the
// canonical JSON of spec and status, the way Kubernetes converts between the
// storage versions of a resource.

import (
	"errors"
	"fmt"
	"strings"
)

// SchemaLevel is the newest storage schema level this build reads and writes.
// Raise it, with a row in levelFields (and an up-conversion when a field's
// meaning changed), whenever a stored shape gains something an older release
// would drop on a rewrite.
//
//   - 1: what 0.1.0 wrote; such records carry no level.
//   - 2: 0.2.0: issue 43's waits and deadlines, Provider spec.versions;
//     issue 47's status.replica of Apply, Upgrade steps and Remediation;
//     issue 48's NodeGroup spec.autoscaling and spec.members.
const SchemaLevel = 2

// MinSchemaLevel is the oldest level this build reads: every level since the
// first, since stored records are kept forever.
const MinSchemaLevel = 1

// Level is the schema level the event was written at: its recorded level, or
// 1 for a record of a release before levels were recorded.
func (e *Event) Level() int { return LevelOf(e.Schema) }

// LevelOf is the level a recorded level field stands for: 0 (absent) is 1.
func LevelOf(recorded int) int {
	if recorded <= 0 {
		return MinSchemaLevel
	}
	return recorded
}

// levelField is one field a schema level added to one kind: a level below
// it does not know the field, so DownConvert drops it.
type levelField struct {
	kind string
	// part is "spec" or "status".
	part string
	// path is the field's path in part; "[]" steps into every element of an
	// array, e.g. machines[].wait.
	path []string
	// refuse says the field cannot be dropped (which machines a group has):
	// a record holding it is not written below its level at all.
	refuse bool
}

// levelFields are, by the level that added them, the fields a lower level
// does not know.
var levelFields = map[int][]levelField{
	2: {
		{UpgradeKind.Kind, "spec", []string{"deadlines"}, false},
		{UpgradeKind.Kind, "status", []string{"machines", "[]", "wait"}, false},
		{MachineKind.Kind, "status", []string{"configWait"}, false},
		{RestoreKind.Kind, "spec", []string{"deadlines"}, false},
		{RestoreKind.Kind, "status", []string{"wait"}, false},
		{RemediationKind.Kind, "status", []string{"wait"}, false},
		{RolloutKind.Kind, "spec", []string{"progressDeadline"}, false},
		{RolloutKind.Kind, "status", []string{"waves", "[]", "wait"}, false},
		{ProviderKind.Kind, "spec", []string{"versions"}, false},
		{ApplyKind.Kind, "status", []string{"replica"}, false},
		{UpgradeKind.Kind, "status", []string{"machines", "[]", "replica"}, false},
		{RemediationKind.Kind, "status", []string{"replica"}, false},
		// Issue 48: a level-1 rewrite would bring removed machines back.
		{NodeGroupKind.Kind, "spec", []string{"autoscaling"}, true},
		{NodeGroupKind.Kind, "spec", []string{"members"}, true},
	},
}

// upSteps convert an object of one level to the next: upSteps[l] takes
// level l to l+1. A missing step is the identity: level 2 only added
// optional fields, which a level-1 record reads as absent. A step is
// where a later level that renames or reshapes a field converts what
// earlier levels stored.
var upSteps = map[int]func(obj *Object) (*Object, error){}

// ErrNewerSchema is wrapped by conversions asked to read a level above
// SchemaLevel: a newer release wrote it, and this one must not guess.
var ErrNewerSchema = errors.New("written by a newer release")

// UpConvert returns obj, read at level from, at SchemaLevel. obj is not
// changed; the result may share nothing with it or be obj itself when no
// step applies. A level above SchemaLevel is an error wrapping
// ErrNewerSchema: such an object is passed on as it is, never converted.
func UpConvert(kind string, obj *Object, from int) (*Object, error) {
	from = LevelOf(from)
	if from > SchemaLevel {
		return nil, fmt.Errorf("%s at schema level %d: %w (this build reads up to %d)", kind, from, ErrNewerSchema, SchemaLevel)
	}
	for l := from; l < SchemaLevel; l++ {
		step := upSteps[l]
		if step == nil || obj == nil {
			continue
		}
		next, err := step(obj)
		if err != nil {
			return nil, fmt.Errorf("converting %s from schema level %d to %d: %w", kind, l, l+1, err)
		}
		obj = next
	}
	return obj, nil
}

// DownConvert returns obj (at SchemaLevel) as level to stores it: without
// the fields the levels above to added. obj is not changed; when it holds
// none of them the result is obj itself, so a write at a lower level costs
// nothing for the objects the newer fields do not touch. Everything else,
// byte for byte, and the order of the fields, stays.
func DownConvert(kind string, obj *Object, to int) (*Object, error) {
	to = LevelOf(to)
	if to > SchemaLevel {
		return nil, fmt.Errorf("%s to schema level %d: %w (this build writes up to %d)", kind, to, ErrNewerSchema, SchemaLevel)
	}
	if obj == nil {
		return nil, nil
	}
	out := obj
	for l := SchemaLevel; l > to; l-- {
		for _, f := range levelFields[l] {
			if f.kind != kind {
				continue
			}
			raw := out.Spec
			if f.part == "status" {
				raw = out.Status
			}
			stripped, changed, err := dropPath(raw, f.path)
			if err != nil {
				return nil, fmt.Errorf("converting %s %s to schema level %d: %w", kind, f.part, l-1, err)
			}
			if !changed {
				continue
			}
			if f.refuse {
				return nil, NewNeedsSchema(kind, obj.Metadata.Name, f.part+"."+fieldPath(f.path), l)
			}
			if out == obj {
				out = obj.DeepCopy()
			}
			if f.part == "status" {
				out.Status = stripped
			} else {
				out.Spec = stripped
			}
		}
	}
	return out, nil
}

// NewerSchemaFields lists, as "spec.deadlines"-style paths, the fields of
// kind a level-to record lacks that SchemaLevel has; for documentation and
// messages.
func NewerSchemaFields(kind string, to int) []string {
	var out []string
	for l := LevelOf(to) + 1; l <= SchemaLevel; l++ {
		for _, f := range levelFields[l] {
			if f.kind == kind {
				out = append(out, f.part+"."+fieldPath(f.path))
			}
		}
	}
	return out
}

func fieldPath(path []string) string {
	s := ""
	for _, p := range path {
		switch {
		case p == "[]":
			s += "[]"
		case s == "":
			s = p
		default:
			s += "." + p
		}
	}
	return s
}

// newerSchemaField is the cause field of NewNewerSchema's answers.
const newerSchemaField = "schema"

// NewNewerSchema says an object cannot be rewritten here: its last record
// is at level, above what this replica (running release) reads, and a
// rewrite would drop what it does not know. A Conflict, so a client reads
// again and retries, and a controller leaves this one piece of work for a
// replica that reads the level while the rest goes on.
func NewNewerSchema(kind, name string, level int, release string) *Error {
	if release == "" {
		release = "this release"
	}
	e := NewConflict(kind, name, fmt.Sprintf("written by a newer RezusCloud (schema %d); this replica runs %s (schema %d): "+
		"the work waits for a replica that reads it", level, release, SchemaLevel))
	e.Causes = []Cause{{Field: newerSchemaField, Type: CauseNotSupported,
		Message: fmt.Sprintf("schema level %d is newer than %d", level, SchemaLevel)}}
	return e
}

// NewNeedsSchema refuses to write an object holding field (a field that
// cannot be dropped) at a level below level: a replica of an older release
// still runs. A 503 with Retry-After: the write goes through once the
// rolling upgrade is done.
func NewNeedsSchema(kind, name, field string, level int) *Error {
	return &Error{Reason: ReasonServiceUnavailable, Kind: kind, Name: name, RetryAfterSeconds: 5,
		Message: fmt.Sprintf("%s %q: %s needs every replica to read schema level %d; a replica of an older release runs: retry once the rolling upgrade is done",
			strings.ToLower(kind), name, field, level),
		Causes: []Cause{{Field: field, Type: CauseNotSupported, Message: fmt.Sprintf("needs schema level %d on every replica", level)}}}
}

// IsNewerSchema reports whether err is NewNewerSchema's.
func IsNewerSchema(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Reason == ReasonConflict && len(e.Causes) == 1 && e.Causes[0].Field == newerSchemaField
}

// UpConvertEvent brings a decoded event's object to SchemaLevel, in place,
// where a reader decodes it. An event above SchemaLevel is left as it is:
// it is read and passed on (GET, list, watch serve its JSON unchanged), and
// only a rewrite is refused (NewNewerSchema). Schema keeps the level the
// event was written at.
func UpConvertEvent(ev *Event) error {
	if ev.Object == nil || ev.Level() > SchemaLevel {
		return nil
	}
	obj, err := UpConvert(ev.Object.Kind, ev.Object, ev.Level())
	if err != nil {
		return err
	}
	ev.Object = obj
	return nil
}
