package eventstore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ClusterCreateTimeout bounds each request that creates or updates a
// stream, bucket or object store on a clustered server. When several
// replicas create the same new replicated stream at once, nats-server
// creates it but may answer none of them; without a bound each replica
// waited JetStream's default 5 s per stream (about a minute at start for
// ten of them). One answered create takes tens of milliseconds, so a
// second is ample; a request that gets no answer in it is read back.
const ClusterCreateTimeout = time.Second

// provisioningJS is a JetStream context for a clustered server whose
// creates and updates of streams, key-value buckets and object stores are
// bounded by ClusterCreateTimeout, and read back when unanswered: one that
// exists with the asked-for configuration is the success the lost answer
// would have been. Everything else is the wrapped context's.
type provisioningJS struct {
	jetstream.JetStream
}

// forCluster wraps js when nc is connected to a clustered server; a single
// server's requests are answered, so its context stays as it is.
func forCluster(nc *nats.Conn, js jetstream.JetStream) jetstream.JetStream {
	if nc.ConnectedClusterName() == "" {
		return js
	}
	return provisioningJS{js}
}

// bounded runs create with a short deadline and, if it gets no answer while
// ctx still runs, looks the result up with lookup; matches says whether what
// exists is what was asked for. Without a match, the timeout is returned
// (as nats.ErrTimeout too, so every retry helper takes it for one).
func bounded[T any](ctx context.Context, create func(context.Context) (T, error),
	lookup func(context.Context) (T, error), matches func(T) bool) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, ClusterCreateTimeout)
	v, err := create(cctx)
	cancel()
	if err == nil || ctx.Err() != nil || !(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)) {
		return v, err
	}
	lctx, cancel := context.WithTimeout(ctx, ClusterCreateTimeout)
	defer cancel()
	if got, lerr := lookup(lctx); lerr == nil && matches(got) {
		return got, nil
	}
	var zero T
	return zero, fmt.Errorf("%w: no answer within %s: %w", nats.ErrTimeout, ClusterCreateTimeout, err)
}

func (p provisioningJS) streamOp(ctx context.Context, cfg jetstream.StreamConfig,
	op func(context.Context, jetstream.StreamConfig) (jetstream.Stream, error)) (jetstream.Stream, error) {
	return bounded(ctx, func(ctx context.Context) (jetstream.Stream, error) { return op(ctx, cfg) },
		func(ctx context.Context) (jetstream.Stream, error) { return p.Stream(ctx, cfg.Name) },
		func(s jetstream.Stream) bool { return covers(cfg, s.CachedInfo().Config) })
}

func (p provisioningJS) CreateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	return p.streamOp(ctx, cfg, p.JetStream.CreateStream)
}

func (p provisioningJS) UpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	return p.streamOp(ctx, cfg, p.JetStream.UpdateStream)
}

func (p provisioningJS) CreateOrUpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	return p.streamOp(ctx, cfg, p.JetStream.CreateOrUpdateStream)
}

func (p provisioningJS) kvOp(ctx context.Context, cfg jetstream.KeyValueConfig,
	op func(context.Context, jetstream.KeyValueConfig) (jetstream.KeyValue, error)) (jetstream.KeyValue, error) {
	var status jetstream.KeyValueStatus
	return bounded(ctx, func(ctx context.Context) (jetstream.KeyValue, error) { return op(ctx, cfg) },
		func(ctx context.Context) (jetstream.KeyValue, error) {
			kv, err := p.KeyValue(ctx, cfg.Bucket)
			if err != nil {
				return nil, err
			}
			status, err = kv.Status(ctx)
			return kv, err
		},
		func(jetstream.KeyValue) bool {
			s, ok := status.(*jetstream.KeyValueBucketStatus)
			return ok && covers(cfg, s.Config())
		})
}

func (p provisioningJS) CreateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return p.kvOp(ctx, cfg, p.JetStream.CreateKeyValue)
}

func (p provisioningJS) UpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return p.kvOp(ctx, cfg, p.JetStream.UpdateKeyValue)
}

func (p provisioningJS) CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return p.kvOp(ctx, cfg, p.JetStream.CreateOrUpdateKeyValue)
}

func (p provisioningJS) objOp(ctx context.Context, cfg jetstream.ObjectStoreConfig,
	op func(context.Context, jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error)) (jetstream.ObjectStore, error) {
	var status jetstream.ObjectStoreStatus
	return bounded(ctx, func(ctx context.Context) (jetstream.ObjectStore, error) { return op(ctx, cfg) },
		func(ctx context.Context) (jetstream.ObjectStore, error) {
			obs, err := p.ObjectStore(ctx, cfg.Bucket)
			if err != nil {
				return nil, err
			}
			status, err = obs.Status(ctx)
			return obs, err
		},
		func(jetstream.ObjectStore) bool {
			s, ok := status.(*jetstream.ObjectBucketStatus)
			// The object store's own fields, as its stream stores them.
			return ok && covers(jetstream.StreamConfig{Description: cfg.Description, MaxAge: cfg.TTL,
				MaxBytes: cfg.MaxBytes, Storage: cfg.Storage, Replicas: cfg.Replicas, Metadata: cfg.Metadata},
				s.StreamInfo().Config)
		})
}

func (p provisioningJS) CreateObjectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	return p.objOp(ctx, cfg, p.JetStream.CreateObjectStore)
}

func (p provisioningJS) UpdateObjectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	return p.objOp(ctx, cfg, p.JetStream.UpdateObjectStore)
}

func (p provisioningJS) CreateOrUpdateObjectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	return p.objOp(ctx, cfg, p.JetStream.CreateOrUpdateObjectStore)
}

// covers reports whether have has every field want sets. A zero field in a
// request means "the server's default", which the server fills in (-1 limits,
// a 2 min duplicate window, metadata of its own), so only set fields count.
func covers(want, have any) bool {
	return coversValue(reflect.ValueOf(want), reflect.ValueOf(have))
}

func coversValue(w, h reflect.Value) bool {
	if w.IsZero() {
		return true
	}
	switch w.Kind() {
	case reflect.Pointer:
		return !h.IsNil() && coversValue(w.Elem(), h.Elem())
	case reflect.Struct:
		for i := range w.NumField() {
			if w.Type().Field(i).IsExported() && !coversValue(w.Field(i), h.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		for _, k := range w.MapKeys() {
			hv := h.MapIndex(k)
			if !hv.IsValid() || !reflect.DeepEqual(w.MapIndex(k).Interface(), hv.Interface()) {
				return false
			}
		}
		return true
	default:
		return reflect.DeepEqual(w.Interface(), h.Interface())
	}
}
