package backup_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/google/uuid"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/controllers/backup"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/controller/controllertest"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
	"github.com/rezuscloud/rezuscloud/talos/etcdsnapshot"
)

// snapshotRevision is the revision of gatedEtcd's snapshot.
const snapshotRevision = 7

// gatedEtcd is one healthy etcd member whose snapshot (a real bolt
// database at snapshotRevision) streams behind the kit's gate: a run waits
// there before the backup whose record the kit counts. Only the snapshot
// is asked of it.
type gatedEtcd struct {
	backup.Nodes
	gate *controllertest.Gate
}

func (gatedEtcd) EtcdStatus(context.Context, *secrets.Bundle, string) (talos.EtcdMemberStatus, error) {
	return talos.EtcdMemberStatus{MemberID: 1, LeaderID: 1}, nil
}

func (n gatedEtcd) EtcdSnapshot(ctx context.Context, _ *secrets.Bundle, _ string) (io.ReadCloser, error) {
	if err := n.gate.Pass(ctx); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := etcdsnapshot.Write(&buf, &etcdsnapshot.Database{Revision: snapshotRevision}); err != nil {
		return nil, err
	}
	return io.NopCloser(&buf), nil
}

// noBundles gives every tenant an empty bundle: gatedEtcd needs none.
type noBundles struct{}

func (noBundles) Bundle(context.Context, string) (*secrets.Bundle, error) {
	return &secrets.Bundle{}, nil
}

// TestConformance: a backup is taken once (one Succeeded of the controller,
// at the snapshot's revision), whether the leader restarts or loses the
// lease mid-snapshot or the tenant's key is redelivered.
func TestConformance(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	controllertest.Conformance(t, controllertest.Subject[*eventstore.EtcdBackups]{
		Lease: backup.Lease, Consumer: backup.Consumer, Queue: backup.Queue,
		// One bucket, sealed with one key file: the replicas' servers share it.
		Setup: func(e *controllertest.Env) *eventstore.EtcdBackups {
			plain, err := eventstore.OpenSecrets(e.Ctx, e.Store)
			require.NoError(e.T, err)
			sealed, err := eventstore.OpenSealedSecrets(e.Ctx, plain, eventstore.SealerConfig{KeyFile: filepath.Join(e.T.TempDir(), "secrets.key")})
			require.NoError(e.T, err)
			b, err := eventstore.OpenEtcdBackups(e.Ctx, e.Store, sealed)
			require.NoError(e.T, err)
			return b
		},
		Replica: func(e *controllertest.Env, backups *eventstore.EtcdBackups, holder string) controllertest.Replica {
			cache := projections.NewCache(e.Store, nil)
			controllertest.Start(e.T, e.Ctx, cache.Run)
			cfg := backup.Config{Store: e.Store, Cache: cache, Backups: backups, PKI: noBundles{}, Holder: holder,
				Nodes: gatedEtcd{gate: e.Gate}, Log: quiet, Clock: e.Clock, TempDir: e.T.TempDir()}
			require.NoError(e.T, cfg.Validate())
			return backup.New(cfg)
		},
		Work: func(e *controllertest.Env, _ *eventstore.EtcdBackups) string {
			create := func(kind *domain.KindInfo, tenant, name string, spec any, finalizers ...string) {
				e.T.Helper()
				raw, _ := json.Marshal(spec)
				_, err := e.Store.Execute(e.Ctx, domain.Command{Op: domain.OpCreate, Ref: domain.ObjectRef(kind, tenant, name),
					Object: &domain.Object{Metadata: domain.ObjectMeta{Name: name, Tenant: tenant, Finalizers: finalizers}, Spec: raw},
					Actor:  "test", Now: e.Clock.Now(), NewUID: uuid.NewString()}, eventstore.UpdateOptions{Retries: 5})
				require.NoError(e.T, err, "creating %s %s", kind.Kind, name)
			}
			// No schedule: the backup below is the only one.
			create(domain.TenantKind, "", "acme", map[string]any{"etcdBackup": map[string]any{}})
			create(domain.MachineKind, "acme", "cp-1", domain.MachineSpec{NodeGroup: "cp", Role: domain.RoleControlPlane, Address: "10.0.0.1"})
			// The backup last: its event queues the tenant. As the API
			// creates it, with the finalizer.
			create(domain.EtcdBackupKind, "acme", "b1", map[string]any{}, domain.BackupObjectFinalizer)
			return "acme"
		},
		Effects: func(e *controllertest.Env, _ *eventstore.EtcdBackups, _ string) (int, error) {
			return controllertest.CountEvents(e.Ctx, e.Store, func(ev *domain.Event) bool {
				if ev.Actor != backup.Actor || ev.Object.Kind != domain.EtcdBackupKind.Kind || ev.Object.Metadata.Name != "b1" {
					return false
				}
				var st domain.EtcdBackupStatus
				return json.Unmarshal(ev.Object.Status, &st) == nil && st.Phase == domain.BackupSucceeded && st.EtcdRevision == snapshotRevision
			})
		},
	})
}
