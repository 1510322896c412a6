package eventstore

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/domain"
)

// EtcdBackupBucket is the JetStream object store bucket of tenants' etcd
// snapshots, each sealed with its tenant's backup key (a sealed stream).
const EtcdBackupBucket = "rezus-etcd-backups"

// backupKeyPrefix names a tenant's generated backup key in the secrets bucket.
const backupKeyPrefix = "etcd-backup-key."

// ErrBackupObjectNotFound says a backup's object is not in the bucket.
var ErrBackupObjectNotFound = errors.New("backup object not found")

// EtcdBackups keeps tenants' etcd snapshots in the object store, sealed as
// they stream in with a per-tenant key kept in the sealed secrets (so neither
// the bucket nor a copy of the data dir shows a snapshot without the seal
// key), and opened as they stream out. Nothing holds a whole snapshot.
type EtcdBackups struct {
	js      jetstream.JetStream
	obs     jetstream.ObjectStore
	stream  jetstream.Stream
	secrets *SealedSecrets
}

// OpenEtcdBackups provisions the bucket (replicas as the store is configured).
func OpenEtcdBackups(ctx context.Context, s *Store, secrets *SealedSecrets) (*EtcdBackups, error) {
	obs, err := s.JetStream().CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      EtcdBackupBucket,
		Description: "tenants' etcd snapshots, each sealed with its tenant's backup key",
		Storage:     jetstream.FileStorage, Replicas: s.Replicas(),
	})
	if err != nil {
		return nil, fmt.Errorf("provisioning bucket %s: %w", EtcdBackupBucket, err)
	}
	// A cluster still placing the bucket's stream may not know it on this
	// node for a moment after the create: CI saw a replica stop on that.
	stream, err := s.JetStream().Stream(ctx, "OBJ_"+EtcdBackupBucket)
	for i := 0; errors.Is(err, jetstream.ErrStreamNotFound) && i < 50; i++ {
		if sleepCtx(ctx, 200*time.Millisecond) != nil {
			break
		}
		stream, err = s.JetStream().Stream(ctx, "OBJ_"+EtcdBackupBucket)
	}
	if err != nil {
		return nil, fmt.Errorf("opening the stream of bucket %s: %w", EtcdBackupBucket, err)
	}
	return &EtcdBackups{js: s.JetStream(), obs: obs, stream: stream, secrets: secrets}, nil
}

// EtcdBackupObject names the object of a tenant's backup. The backup's uid
// is part of it, so a backup deleted and created again under the same name
// never meets the old object.
func EtcdBackupObject(tenant, name, uid string) string {
	return tenant + "/" + name + "/" + uid
}

func (b *EtcdBackups) key(ctx context.Context, tenant string) ([]byte, error) {
	return tenantKey(ctx, b.secrets, backupKeyPrefix, "etcd backup key", tenant)
}

// objectTenant reads the tenant out of an object name.
func objectTenant(object string) (string, error) {
	tenant, _, ok := strings.Cut(object, "/")
	if !ok || domain.ValidateName(tenant, "tenant") != nil {
		return "", fmt.Errorf("%q is not a backup object name", object)
	}
	return tenant, nil
}

// Put seals plain into the object (EtcdBackupObject) as it is read, and
// answers the object's sealed size. The object exists only once the whole
// of plain was read and stored: a failed read (a snapshot that fails its own
// check, say) leaves nothing, and an object of the same name is replaced
// only then. A process killed mid-way leaves chunks no object names, which
// SweepPartial removes.
func (b *EtcdBackups) Put(ctx context.Context, object string, plain io.Reader) (uint64, error) {
	tenant, err := objectTenant(object)
	if err != nil {
		return 0, err
	}
	key, err := b.key(ctx, tenant)
	if err != nil {
		return 0, err
	}
	sealed, err := SealStream(key, object, plain)
	if err != nil {
		return 0, err
	}
	size, err := b.put(ctx, jetstream.ObjectMeta{Name: object, Description: "etcd snapshot, a sealed stream"}, sealed)
	if err != nil {
		return 0, fmt.Errorf("storing backup object %s: %w", object, err)
	}
	return size, nil
}

// Open streams the content of the object; a read fails with an error
// wrapping ErrSealedStreamDamaged when the stored object was altered or cut
// short. A missing object answers ErrBackupObjectNotFound.
func (b *EtcdBackups) Open(ctx context.Context, object string) (io.ReadCloser, error) {
	tenant, err := objectTenant(object)
	if err != nil {
		return nil, err
	}
	key, err := b.key(ctx, tenant)
	if err != nil {
		return nil, err
	}
	res, err := b.obs.Get(ctx, object)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrBackupObjectNotFound, object)
	}
	if err != nil {
		return nil, fmt.Errorf("reading backup object %s: %w", object, err)
	}
	return openedObject{Reader: OpenStream(key, object, objectReader{res}), res: res}, nil
}

// objectReader reports the object store's digest mismatch (bytes changed
// under the object's record) as a damaged stream too.
type objectReader struct{ r io.Reader }

func (o objectReader) Read(p []byte) (int, error) {
	n, err := o.r.Read(p)
	if errors.Is(err, jetstream.ErrDigestMismatch) {
		err = damaged("the object's bytes do not match its digest")
	}
	return n, err
}

type openedObject struct {
	io.Reader
	res jetstream.ObjectResult
}

func (o openedObject) Close() error { return o.res.Close() }

// Delete removes the object; a missing one is not an error.
func (b *EtcdBackups) Delete(ctx context.Context, object string) error {
	err := b.obs.Delete(ctx, object)
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("deleting backup object %s: %w", object, err)
	}
	return nil
}

// SweepPartial purges the chunks no object names whose newest chunk was
// stored more than quiet ago: what a Put killed mid-way left. A Put in
// flight (on any replica: backups of tenants worked by other replicas run
// meanwhile) stores a chunk every few milliseconds, so its chunks are
// never quiet that long. It answers how many chunk subjects it purged.
func (b *EtcdBackups) SweepPartial(ctx context.Context, quiet time.Duration) (int, error) {
	prefix := "$O." + EtcdBackupBucket + ".C."
	info, err := b.stream.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return 0, fmt.Errorf("listing backup chunks: %w", err)
	}
	if len(info.State.Subjects) == 0 {
		return 0, nil
	}
	named := map[string]bool{}
	objects, err := b.obs.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return 0, fmt.Errorf("listing backup objects: %w", err)
	}
	for _, o := range objects {
		named[o.NUID] = true
	}
	purged := 0
	for subj := range info.State.Subjects {
		if named[strings.TrimPrefix(subj, prefix)] {
			continue
		}
		last, err := b.stream.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return purged, fmt.Errorf("reading partial backup chunks %s: %w", subj, err)
		}
		if time.Since(last.Time) < quiet {
			continue // a put in flight
		}
		if err := b.stream.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			return purged, fmt.Errorf("purging partial backup chunks %s: %w", subj, err)
		}
		purged++
	}
	return purged, nil
}

// DeleteKey removes the tenant's backup key: for a tenant that is gone, whose
// backups are gone with it. Removing a missing key is not an error.
func (b *EtcdBackups) DeleteKey(ctx context.Context, tenant string) error {
	if err := checkTenant(tenant); err != nil {
		return err
	}
	if err := b.secrets.Delete(ctx, backupKeyPrefix+tenant); err != nil {
		return fmt.Errorf("deleting the etcd backup key of %s: %w", tenant, err)
	}
	return nil
}

// Chunks of an object: the object store's default size, and how many are in
// flight at once while an object is written.
const (
	objectChunkSize = 128 << 10
	putWindow       = 16
)

// put writes an object the way jetstream.ObjectStore.Put lays it out (its
// chunk subjects, its meta message and digest, so Get, List and Delete read
// it), but with at most putWindow chunks awaiting their acknowledgement
// instead of Put's 4000 (some 500 MiB at 128 KiB a chunk, held in the
// client's and the server's buffers when the store is slower than the
// reader): what an object of any size costs in memory is bounded by the
// window. The meta message goes last, so the object exists only once every
// chunk is stored; on failure the chunks written are purged.
func (b *EtcdBackups) put(ctx context.Context, meta jetstream.ObjectMeta, r io.Reader) (uint64, error) {
	old, err := b.obs.GetInfo(ctx, meta.Name, jetstream.GetObjectInfoShowDeleted())
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return 0, err
	}
	id, err := random(16)
	if err != nil {
		return 0, err
	}
	nuid := hex.EncodeToString(id)
	chunkSubj := "$O." + EtcdBackupBucket + ".C." + nuid
	purge := func() {
		// With the request's context gone, purge with a short one of our own.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = b.stream.Purge(pctx, jetstream.WithPurgeSubject(chunkSubj))
	}
	js := b.js
	h := sha256.New()
	buf := make([]byte, objectChunkSize)
	var inflight []jetstream.PubAckFuture
	wait := func(f jetstream.PubAckFuture) error {
		select {
		case <-f.Ok():
			return nil
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var size uint64
	var chunks uint32
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			if len(inflight) == putWindow {
				if err := wait(inflight[0]); err != nil {
					purge()
					return 0, err
				}
				inflight = inflight[1:]
			}
			h.Write(buf[:n])
			msg := nats.NewMsg(chunkSubj)
			msg.Data = append([]byte(nil), buf[:n]...)
			f, err := js.PublishMsgAsync(msg)
			if err != nil {
				purge()
				return 0, err
			}
			inflight = append(inflight, f)
			size += uint64(n)
			chunks++
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			purge()
			return 0, rerr
		}
	}
	for _, f := range inflight {
		if err := wait(f); err != nil {
			purge()
			return 0, err
		}
	}
	meta.Opts = &jetstream.ObjectMetaOptions{ChunkSize: objectChunkSize}
	info := jetstream.ObjectInfo{ObjectMeta: meta, Bucket: EtcdBackupBucket, NUID: nuid, Size: size,
		ModTime: time.Now().UTC(), Chunks: chunks, Digest: jetstream.GetObjectDigestValue(h)}
	mm := nats.NewMsg("$O." + EtcdBackupBucket + ".M." + base64.URLEncoding.EncodeToString([]byte(meta.Name)))
	mm.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	if mm.Data, err = json.Marshal(info); err != nil {
		purge()
		return 0, err
	}
	if _, err := js.PublishMsg(ctx, mm); err != nil {
		purge()
		return 0, err
	}
	if old != nil && !old.Deleted {
		_ = b.stream.Purge(ctx, jetstream.WithPurgeSubject("$O."+EtcdBackupBucket+".C."+old.NUID))
	}
	return size, nil
}
