package domain

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Op is what a command asks for.
type Op string

// Operations.
const (
	OpCreate       Op = "Create"
	OpUpdate       Op = "Update"
	OpUpdateStatus Op = "UpdateStatus"
	OpDelete       Op = "Delete"
)

// Command is a request to change one object. The caller fills in the time and
// the new UID, so Decide stays deterministic.
type Command struct {
	Op  Op
	Ref Ref
	// Object is the object as sent (Create, Update, UpdateStatus).
	Object *Object
	// ExpectedVersion, when set, must equal the object's current resourceVersion.
	ExpectedVersion string
	Actor           string
	CorrelationID   string
	Now             time.Time
	// NewUID is the uid a created object gets.
	NewUID string
	// Dependents is how many objects must go before this one can (a tenant's
	// objects). While there are any, deletion only marks the object terminating.
	Dependents int
}

// Decide validates a command against the current state of its aggregate (nil
// when the object does not exist) and returns the events it causes. No events
// and no error means the command changes nothing.
func Decide(state *Object, cmd Command) ([]Event, error) {
	kind, ok := LookupKind(cmd.Ref.Kind)
	if !ok {
		return nil, NewBadRequest(fmt.Sprintf("unknown kind %q", cmd.Ref.Kind))
	}
	if state != nil && state.Metadata.ResourceVersion != "" && cmd.ExpectedVersion != "" &&
		cmd.ExpectedVersion != state.Metadata.ResourceVersion {
		return nil, NewConflict(kind.Kind, cmd.Ref.Name, "the object has been modified; please apply your changes to the latest version and try again")
	}
	switch cmd.Op {
	case OpCreate:
		return decideCreate(kind, state, cmd)
	case OpUpdate:
		return decideUpdate(kind, state, cmd)
	case OpUpdateStatus:
		return decideStatus(kind, state, cmd)
	case OpDelete:
		return decideDelete(kind, state, cmd)
	}
	return nil, NewBadRequest(fmt.Sprintf("unknown operation %q", cmd.Op))
}

func (c Command) event(typ string, action Action, obj *Object) Event {
	return Event{Type: typ, Action: action, Actor: c.Actor, Time: c.Now.UTC(), CorrelationID: c.CorrelationID, Object: obj}
}

// validateMeta checks the parts of metadata a client controls.
func validateMeta(kind *KindInfo, ref Ref, in *Object) []Cause {
	causes := ValidateName(ref.Name, "metadata.name")
	if in.Metadata.Name != "" && in.Metadata.Name != ref.Name {
		causes = append(causes, Cause{Field: "metadata.name", Type: CauseInvalid, Message: fmt.Sprintf("%q does not match the name in the URL %q", in.Metadata.Name, ref.Name)})
	}
	if kind.TenantScoped {
		if in.Metadata.Tenant != "" && in.Metadata.Tenant != ref.Tenant {
			causes = append(causes, Cause{Field: "metadata.tenant", Type: CauseInvalid, Message: fmt.Sprintf("%q does not match the tenant in the URL %q", in.Metadata.Tenant, ref.Tenant)})
		}
	} else if in.Metadata.Tenant != "" {
		causes = append(causes, Cause{Field: "metadata.tenant", Type: CauseForbidden, Message: fmt.Sprintf("%s is cluster-scoped", kind.Kind)})
	}
	if in.APIVersion != "" && in.APIVersion != APIVersion {
		causes = append(causes, Cause{Field: "apiVersion", Type: CauseNotSupported, Message: fmt.Sprintf("%q is not supported: must be %s", in.APIVersion, APIVersion)})
	}
	if in.Kind != "" && in.Kind != kind.Kind {
		causes = append(causes, Cause{Field: "kind", Type: CauseInvalid, Message: fmt.Sprintf("%q does not match the resource %s", in.Kind, kind.Plural)})
	}
	causes = append(causes, ValidateLabels(in.Metadata.Labels, field.NewPath("metadata", "labels"))...)
	causes = append(causes, ValidateAnnotations(in.Metadata.Annotations, field.NewPath("metadata", "annotations"))...)
	causes = append(causes, ValidateFinalizers(in.Metadata.Finalizers, field.NewPath("metadata", "finalizers"))...)
	return causes
}

func decideCreate(kind *KindInfo, state *Object, cmd Command) ([]Event, error) {
	in := cmd.Object
	causes := validateMeta(kind, cmd.Ref, in)
	spec, c := kind.NormalizeSpec(in.Spec)
	causes = append(causes, c...)
	if len(causes) > 0 {
		return nil, invalid(kind, cmd.Ref.Name, causes)
	}
	if state != nil {
		return nil, NewAlreadyExists(kind.Kind, cmd.Ref.Name)
	}
	if kind.CreateSpec != nil {
		if spec, causes = kind.CreateSpec(spec); len(causes) > 0 {
			return nil, invalid(kind, cmd.Ref.Name, causes)
		}
	}
	now := cmd.Now.UTC()
	obj := &Object{
		APIVersion: APIVersion, Kind: kind.Kind,
		Metadata: ObjectMeta{
			Name: cmd.Ref.Name, Tenant: cmd.Ref.Tenant, UID: cmd.NewUID, Generation: 1,
			CreationTimestamp: &now,
			Labels:            emptyToNil(in.Metadata.Labels),
			Annotations:       emptyToNil(in.Metadata.Annotations),
			Finalizers:        emptySliceToNil(in.Metadata.Finalizers),
		},
		Spec: spec,
	}
	if kind.InitialStatus != nil {
		// InitialStatus is canonical (a test holds every kind to it), so writing
		// it back unchanged is a no-op.
		obj.Status = kind.InitialStatus()
	}
	return []Event{cmd.event(kind.Kind+"Created", ActionCreated, obj)}, nil
}

func decideUpdate(kind *KindInfo, state *Object, cmd Command) ([]Event, error) {
	in := cmd.Object
	causes := validateMeta(kind, cmd.Ref, in)
	spec, c := kind.NormalizeSpec(in.Spec)
	causes = append(causes, c...)
	if len(causes) > 0 {
		return nil, invalid(kind, cmd.Ref.Name, causes)
	}
	if state == nil {
		return nil, NewNotFound(kind.Kind, cmd.Ref.Name)
	}
	if in.Metadata.UID != "" && in.Metadata.UID != state.Metadata.UID {
		return nil, NewConflict(kind.Kind, cmd.Ref.Name, "the uid does not match: the object was deleted and created again")
	}
	if kind.UpdateSpec != nil {
		if spec, causes = kind.UpdateSpec(state.Spec, spec); len(causes) > 0 {
			return nil, invalid(kind, cmd.Ref.Name, causes)
		}
	}
	next := state.DeepCopy()
	next.Metadata.ResourceVersion = ""
	next.Metadata.Labels = emptyToNil(in.Metadata.Labels)
	next.Metadata.Annotations = emptyToNil(in.Metadata.Annotations)
	next.Metadata.Finalizers = emptySliceToNil(in.Metadata.Finalizers)
	next.Spec = spec
	specChanged := !bytes.Equal(spec, state.Spec)
	if specChanged {
		next.Metadata.Generation++
	}
	if state.Terminating() {
		for _, f := range next.Metadata.Finalizers {
			if !slices.Contains(state.Metadata.Finalizers, f) {
				return nil, NewInvalid(kind.Kind, cmd.Ref.Name, []Cause{{Field: "metadata.finalizers", Type: CauseForbidden,
					Message: fmt.Sprintf("no new finalizers can be added while the object is being deleted (%q)", f)}})
			}
		}
		if len(next.Metadata.Finalizers) == 0 && cmd.Dependents == 0 {
			return []Event{cmd.event(kind.Kind+"Deleted", ActionDeleted, next)}, nil
		}
	}
	if !specChanged && metaEqual(&state.Metadata, &next.Metadata) {
		return nil, nil
	}
	typ := kind.Kind + "Updated"
	switch {
	case specChanged && kind.SpecEvent != nil && metaEqual(&state.Metadata, &next.Metadata):
		if t := kind.SpecEvent(state.Spec, spec); t != "" {
			typ = t
		}
	case !specChanged && kind.MetaEvent != nil:
		if t := kind.MetaEvent(&state.Metadata, &next.Metadata); t != "" {
			typ = t
		}
	}
	return []Event{cmd.event(typ, ActionUpdated, next)}, nil
}

func decideStatus(kind *KindInfo, state *Object, cmd Command) ([]Event, error) {
	status, causes := kind.NormalizeStatus(cmd.Object.Status)
	if len(causes) > 0 {
		return nil, invalid(kind, cmd.Ref.Name, causes)
	}
	if state == nil {
		return nil, NewNotFound(kind.Kind, cmd.Ref.Name)
	}
	if bytes.Equal(status, state.Status) {
		return nil, nil
	}
	next := state.DeepCopy()
	next.Metadata.ResourceVersion = ""
	next.Status = status
	return []Event{cmd.event(kind.Kind+"StatusUpdated", ActionUpdated, next)}, nil
}

func decideDelete(kind *KindInfo, state *Object, cmd Command) ([]Event, error) {
	if state == nil {
		return nil, NewNotFound(kind.Kind, cmd.Ref.Name)
	}
	next := state.DeepCopy()
	next.Metadata.ResourceVersion = ""
	if state.Terminating() {
		// Deleting again finishes the deletion once nothing holds it back.
		if len(state.Metadata.Finalizers) == 0 && cmd.Dependents == 0 {
			return []Event{cmd.event(kind.Kind+"Deleted", ActionDeleted, next)}, nil
		}
		return nil, nil
	}
	now := cmd.Now.UTC()
	next.Metadata.DeletionTimestamp = &now
	if len(next.Metadata.Finalizers) > 0 || cmd.Dependents > 0 {
		return []Event{cmd.event(kind.Kind+"DeletionRequested", ActionUpdated, next)}, nil
	}
	return []Event{cmd.event(kind.Kind+"Deleted", ActionDeleted, next)}, nil
}

func metaEqual(a, b *ObjectMeta) bool {
	return maps.Equal(a.Labels, b.Labels) && maps.Equal(a.Annotations, b.Annotations) && slices.Equal(a.Finalizers, b.Finalizers)
}

func emptyToNil(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

func emptySliceToNil(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return slices.Clone(s)
}

// invalid reports causes as 422 Invalid, or as 400 BadRequest when the body
// could not be decoded at all (unknown fields, wrong JSON types, a key given
// twice): then the request is malformed rather than a well-formed object with
// bad values.
func invalid(kind *KindInfo, name string, causes []Cause) *Error {
	for _, c := range causes {
		if c.Type == CauseUnknownField || c.Type == CauseTypeInvalid || (c.Type == CauseDuplicate && c.Message == msgDuplicateField) {
			e := NewInvalid(kind.Kind, name, causes)
			e.Reason = ReasonBadRequest
			return e
		}
	}
	return NewInvalid(kind.Kind, name, causes)
}
