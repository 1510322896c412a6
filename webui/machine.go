package webui

// machineRoutes serves a machine's page.
func (u *UI) machineRoutes(p *pages) {}
