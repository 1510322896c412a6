// Package etcdsnapshot reads and writes etcd snapshots as etcd makes them:
// its bolt database (the mvcc "key" bucket of revisions, the "meta" bucket)
// followed by the SHA-256 of the bytes before it.
//
// The Talos node emulator writes one with Write, streamed and never held
// whole, and reads uploaded ones back for a recovery; the backup controller
// reads the revision of the snapshots it stores. Reading goes through bbolt,
// etcd's own database library, so a snapshot of a real etcd reads as well as
// the emulator's. It imports nothing of this module, so both can use it.
package etcdsnapshot
