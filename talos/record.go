package talos

import (
	"context"
	"fmt"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// Reasons of a machine's ConfigApplied condition.
const (
	// ReasonDay0 : the machine holds the config it was built with (user data
	// or the maintenance-mode apply).
	ReasonDay0 = "Day0"
	// ReasonAppliedInPlace : the last config was applied without a reboot.
	ReasonAppliedInPlace = "AppliedInPlace"
	// ReasonAppliedWithReboot : the last config needed a reboot.
	ReasonAppliedWithReboot = "AppliedWithReboot"
	// ReasonApplyFailed : the node refused the config or did not answer.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonRenderFailed : the config could not be rendered (a patch that does
	// not apply to this machine, ...).
	ReasonRenderFailed = "RenderFailed"
)

// ConfigRecorder writes what the config path learnt about a machine: the hash
// of the config it holds (an update whose event is MachineConfigApplied, so a
// machine's event history is its config history) and its ConfigApplied
// condition and configUpToDate status. Every writer of machine configs (the
// day-2 controller, a Kubernetes upgrade, the metal path) records through it.
type ConfigRecorder struct {
	Store *eventstore.Store
	// Actor is recorded on the events.
	Actor string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Hint, when set, decides on the cached state first.
	Hint eventstore.StateHint
}

func (r ConfigRecorder) now() time.Time {
	if r.Now == nil {
		return time.Now()
	}
	return r.Now()
}

// Applied records that machine ref holds the config whose hash is given:
// reason is one of the Reason* constants, message says how (e.g. Talos's mode
// details). Recording the same hash again changes nothing but the condition.
func (r ConfigRecorder) Applied(ctx context.Context, ref domain.Ref, hash, reason, message string) error {
	_, err := r.Store.Update(ctx, ref, eventstore.UpdateOptions{Retries: 5, Hint: r.Hint}, func(state *domain.Object) ([]domain.Event, error) {
		if state == nil {
			return nil, domain.NewNotFound(ref.Kind, ref.Name)
		}
		if state.Metadata.Annotations[domain.AnnotationConfigHash] == hash {
			return nil, nil
		}
		next := state.DeepCopy()
		if next.Metadata.Annotations == nil {
			next.Metadata.Annotations = map[string]string{}
		}
		next.Metadata.Annotations[domain.AnnotationConfigHash] = hash
		return domain.Decide(state, domain.Command{Op: domain.OpUpdate, Ref: ref, Object: next, Actor: r.Actor, Now: r.now()})
	})
	if err != nil {
		return fmt.Errorf("recording the config of machine %s: %w", ref.Name, err)
	}
	return r.status(ctx, ref, true, domain.Condition{Type: domain.ConditionConfigApplied, Status: "True", Reason: reason, Message: message})
}

// Failed records that machine ref does not hold its rendered config, and why.
func (r ConfigRecorder) Failed(ctx context.Context, ref domain.Ref, reason, message string) error {
	return r.status(ctx, ref, false, domain.Condition{Type: domain.ConditionConfigApplied, Status: "False", Reason: reason, Message: message})
}

// maxConfigMessage bounds a condition message (a gRPC error can be long).
const maxConfigMessage = 1024

func (r ConfigRecorder) status(ctx context.Context, ref domain.Ref, upToDate bool, c domain.Condition) error {
	if len(c.Message) > maxConfigMessage {
		c.Message = c.Message[:maxConfigMessage-3] + "..."
	}
	w := eventstore.StatusWriter{Store: r.Store, Actor: r.Actor, Now: r.Now, Hint: r.Hint}
	_, err := eventstore.UpdateStatus(ctx, w, ref, func(obj *domain.Object, st *domain.MachineStatus) (bool, error) {
		old := domain.FindCondition(st.Conditions, c.Type)
		if st.ConfigUpToDate == upToDate && old != nil && old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
			return false, nil
		}
		st.ConfigUpToDate = upToDate
		st.Conditions = domain.SetCondition(st.Conditions, c, r.now())
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("recording the config status of machine %s: %w", ref.Name, err)
	}
	return nil
}
