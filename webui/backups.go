package webui

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// backupRoutes serve taking a backup now, downloading one's snapshot and
// restoring from one; the backups and restores are the tenant page's live
// "backups" fragment.
func (u *UI) backupRoutes(p *pages) {
	p.POST("/tenants/:tenant/backups", u.takeBackup)
	p.GET("/tenants/:tenant/backups/:name/snapshot", u.downloadSnapshot)
	p.POST("/tenants/:tenant/restore", u.restoreBackup)
}

// backupsView is the tenant's newest backups and restores.
type backupsView struct {
	Tenant   string
	Backups  []domain.EtcdBackup
	Restores []domain.Restore
}

func etcdBackupMeta(b *domain.EtcdBackup) *domain.ObjectMeta { return &b.Metadata }
func restoreMeta(r *domain.Restore) *domain.ObjectMeta       { return &r.Metadata }

// backupRows is the live table of the tenant's backups (newest 50) and
// restores (newest 10).
func (u *UI) backupRows(c echo.Context, tenant string) (templ.Component, error) {
	bs, err := listOf[domain.EtcdBackup](u, c.Request(), "/tenants/"+tenant+"/etcdbackups")
	if err != nil {
		return nil, err
	}
	rs, err := listOf[domain.Restore](u, c.Request(), "/tenants/"+tenant+"/restores")
	if err != nil {
		return nil, err
	}
	newestFirst(bs, etcdBackupMeta)
	newestFirst(rs, restoreMeta)
	return backupTable(viewerOf(c), backupsView{Tenant: tenant, Backups: firstN(bs, 50), Restores: firstN(rs, 10)}), nil
}

// afterBackupWrite answers an htmx request with the fresh rows, any other
// with a redirect to the tenant page's section.
func (u *UI) afterBackupWrite(c echo.Context, tenant string) error {
	if !isHTMX(c) {
		return c.Redirect(http.StatusSeeOther, "/ui/tenants/"+tenant+"#backups")
	}
	rows, err := u.backupRows(c, tenant)
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, rows)
}

// takeBackup creates a manual EtcdBackup; the controller takes it and the
// live table shows its progress.
func (u *UI) takeBackup(c echo.Context) error {
	t := c.Param("tenant")
	name := "manual-" + u.now().UTC().Format("20060102-150405")
	body := map[string]any{"metadata": map[string]any{"name": name}, "spec": map[string]any{"trigger": domain.BackupManual}}
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPost, Path: "/tenants/" + t + "/etcdbackups", Body: body}, nil); err != nil {
		return u.fail(c, err)
	}
	return u.afterBackupWrite(c, t)
}

// restoreBackup creates a Restore of the form's backup (the API refuses one
// whose object does not open, with the reason).
func (u *UI) restoreBackup(c echo.Context) error {
	t := c.Param("tenant")
	backup := c.FormValue("backup")
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPost, Path: "/tenants/" + t + "/restore",
		Body: map[string]string{"backup": backup}}, nil); err != nil {
		return u.fail(c, err)
	}
	return u.afterBackupWrite(c, t)
}

// downloadSnapshot streams a backup's plain snapshot as a file; the API
// checks the role and audits the download.
func (u *UI) downloadSnapshot(c echo.Context) error {
	t, name := c.Param("tenant"), c.Param("name")
	b, err := getOf[domain.EtcdBackup](u, c.Request(), "/tenants/"+t+"/etcdbackups/"+url.PathEscape(name))
	if err != nil {
		return u.fail(c, err)
	}
	body, err := u.api.stream(c.Request().Context(), c.Request(), apiRequest{Path: "/tenants/" + t + "/etcdbackups/" + url.PathEscape(name) + "/snapshot"})
	if err != nil {
		return u.fail(c, err)
	}
	defer body.Close()
	h := c.Response().Header()
	h.Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", t+"-"+name+".snapshot"))
	h.Set("Cache-Control", "no-store")
	h.Set(echo.HeaderContentType, "application/octet-stream")
	h.Set(echo.HeaderContentLength, strconv.FormatInt(b.Status.Size, 10))
	c.Response().WriteHeader(http.StatusOK)
	if _, err := io.Copy(c.Response(), body); err != nil {
		// The short body tells the browser the download failed.
		panic(http.ErrAbortHandler)
	}
	return nil
}

// backupSize shows a snapshot's size in binary units.
func backupSize(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
