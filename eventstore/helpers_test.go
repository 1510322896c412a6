package eventstore_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// now is the injected clock of every command, so events are deterministic.
var now = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// testCtx bounds a test so that a hung NATS call fails it instead of the package timeout.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// recv waits for one value from ch, failing the test after timeout.
func recv[T any](t *testing.T, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
		panic("unreachable")
	}
}

func tenantRef(name string) domain.Ref { return domain.Ref{Kind: "Tenant", Name: name} }

func nodeGroupRef(tenant, name string) domain.Ref {
	return domain.Ref{Kind: "NodeGroup", Tenant: tenant, Name: name}
}

// createCmd is a valid create of ref with the given uid.
func createCmd(ref domain.Ref, uid string) domain.Command {
	obj := &domain.Object{Metadata: domain.ObjectMeta{Name: ref.Name, Tenant: ref.Tenant}}
	if ref.Kind == "NodeGroup" {
		obj.Spec = json.RawMessage(`{"role":"worker","count":1,"provider":"local"}`)
	}
	return domain.Command{Op: domain.OpCreate, Ref: ref, Object: obj, Actor: "test", Now: now, NewUID: uid}
}

// labelCmd is an update of cur that sets one more label.
func labelCmd(cur *domain.Object, key, value, expectedVersion string) domain.Command {
	obj := cur.DeepCopy()
	obj.Metadata.ResourceVersion = ""
	if obj.Metadata.Labels == nil {
		obj.Metadata.Labels = map[string]string{}
	}
	obj.Metadata.Labels[key] = value
	return domain.Command{Op: domain.OpUpdate, Ref: cur.Ref(), Object: obj, ExpectedVersion: expectedVersion, Actor: "test", Now: now}
}

func deleteCmd(ref domain.Ref) domain.Command {
	return domain.Command{Op: domain.OpDelete, Ref: ref, Actor: "test", Now: now}
}

func mustExecute(t *testing.T, ctx context.Context, s *eventstore.Store, cmd domain.Command) eventstore.Result {
	t.Helper()
	res, err := s.Execute(ctx, cmd, eventstore.UpdateOptions{})
	require.NoError(t, err, "executing %s %s", cmd.Op, cmd.Ref)
	return res
}

func lastSeq(t *testing.T, ctx context.Context, s *eventstore.Store) uint64 {
	t.Helper()
	_, last, err := s.Bounds(ctx)
	require.NoError(t, err)
	return last
}
