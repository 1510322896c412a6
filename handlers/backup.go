package handlers

import (
	"context"
	"fmt"
	"io"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// Backuper writes an archive of the server's own data: every stream, KV
// bucket and object store of its NATS account (eventstore.WriteBackup, wired
// in cmd with the read model's order).
type Backuper interface {
	WriteBackup(ctx context.Context, w io.Writer) error
}

// BackupFunc adapts a function to Backuper.
type BackupFunc func(ctx context.Context, w io.Writer) error

// WriteBackup calls f.
func (f BackupFunc) WriteBackup(ctx context.Context, w io.Writer) error { return f(ctx, w) }

func (a *API) backupRoutes(g *authed) {
	g.GET("/admin/backup", a.backupData)
}

// backupData streams a backup archive (admin only, audited). The archive
// carries the NATS operator and account seeds and the sealed secrets (not
// their key), so it is as sensitive as the data dir. Once the first bytes
// are out the status is sent; a failure after that ends the body early, and
// the archive, without its end, is refused by every reader as truncated.
func (a *API) backupData(c echo.Context) error {
	c.Set(auditTargetKey, auditTarget{kind: "Backup", detail: "backup of the server's data"})
	if a.backup == nil {
		return &domain.Error{Reason: domain.ReasonServiceUnavailable, Message: "backups are not enabled on this server"}
	}
	ctx, cancel := context.WithCancel(c.Request().Context())
	defer cancel()
	defer context.AfterFunc(a.stopping, cancel)()
	res := c.Response()
	res.Header().Set(echo.HeaderContentType, "application/x-tar")
	res.Header().Set(echo.HeaderContentDisposition, `attachment; filename="rezuscloud-backup.tar"`)
	res.Header().Set("Cache-Control", "no-store")
	err := a.backup.WriteBackup(ctx, res)
	if err == nil {
		return nil
	}
	if !res.Committed {
		return domain.NewInternal(fmt.Errorf("backup failed: %w", err))
	}
	a.log.Error("backup failed after its first bytes were sent; the client gets a truncated archive", "err", err)
	return nil
}
