package webui

// tenantRoutes serves one tenant's page and its actions.
func (u *UI) tenantRoutes(p *pages) {}
