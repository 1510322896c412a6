package eventstoretest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// Create writes the creation of one object (spec as given) and fails the
// test on an error.
func (e *Env) Create(tb testing.TB, kind *domain.KindInfo, tenant, name, spec string) uint64 {
	tb.Helper()
	ref := domain.Ref{Kind: kind.Kind, Tenant: tenant, Name: name}
	res, err := e.Store.Execute(context.Background(), domain.Command{Op: domain.OpCreate, Ref: ref,
		Object: &domain.Object{Metadata: domain.ObjectMeta{Name: name, Tenant: tenant}, Spec: json.RawMessage(spec)},
		Actor:  "test", Now: time.Now(), NewUID: fmt.Sprintf("uid-%s-%s-%s", kind.Subject, tenant, name)}, eventstore.UpdateOptions{})
	if err != nil {
		tb.Fatalf("creating %s: %v", ref, err)
	}
	return res.Seq
}

// Populate creates n objects of kind in tenant, named <prefix>-<i>, with 16
// writers at once (benchmarks fill a tenant with 100,000 objects with it).
func (e *Env) Populate(tb testing.TB, kind *domain.KindInfo, tenant, prefix string, n int, spec string) {
	tb.Helper()
	const writers = 16
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += writers {
				e.Create(tb, kind, tenant, fmt.Sprintf("%s-%07d", prefix, i), spec)
			}
		}()
	}
	wg.Wait()
}
