package webui

// settingsRoutes serves users, API tokens, providers and the audit log.
func (u *UI) settingsRoutes(p *pages) {}
