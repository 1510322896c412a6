package webui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// metalRoutes serve a tenant's registered metal machines: registering one,
// and which wait in maintenance mode for their config.
func (u *UI) metalRoutes(p *pages) {
	p.GET("/tenants/:tenant/metal", u.metalPage)
	p.POST("/tenants/:tenant/metal", u.registerMachine)
}

// metalForm is the register form's values and the API's refusal.
type metalForm struct {
	Tenant                                           string
	Name, Address, Hostname, NodeGroup, Role, Labels string
	// InstallDisk is the machine's own install disk ("" for its group's).
	InstallDisk string
	Errors      formErrors
	// Registered names the machine just registered, for the confirmation.
	Registered string
}

var metalFormFields = []string{"installDisk", "metadata.name", "metadata.labels", "metadata.annotations", "spec.address", "spec.hostname", "spec.nodeGroup", "spec.role"}

// metalView is the page: the form, the tenant's node groups to choose from
// and its registered machines.
type metalView struct {
	Tenant     string
	CanWrite   bool
	Form       metalForm
	NodeGroups []domain.NodeGroup
	Machines   []domain.Machine
}

// registeredMachines are the machines the user registered: those no
// provider made (no managed-by label).
func registeredMachines(ms []domain.Machine) []domain.Machine {
	var out []domain.Machine
	for _, m := range ms {
		if m.Metadata.Labels[domain.LabelManagedBy] == "" {
			out = append(out, m)
		}
	}
	return out
}

// inMaintenance says a registered machine has had no config applied yet: it
// waits in Talos's maintenance mode until a metal node group selects it.
func inMaintenance(m domain.Machine) bool {
	return m.Metadata.Annotations[domain.AnnotationConfigHash] == ""
}

func (u *UI) metalView(c echo.Context, f metalForm) (metalView, error) {
	t := f.Tenant
	ngs, err := listOf[domain.NodeGroup](u, c.Request(), "/tenants/"+t+"/nodegroups")
	if err != nil {
		return metalView{}, err
	}
	ms, err := listOf[domain.Machine](u, c.Request(), "/tenants/"+t+"/machines")
	if err != nil {
		return metalView{}, err
	}
	return metalView{Tenant: t, CanWrite: viewerOf(c).CanWriteTenant(t), Form: f, NodeGroups: ngs, Machines: registeredMachines(ms)}, nil
}

func (u *UI) metalPage(c echo.Context) error {
	t := c.Param("tenant")
	if _, err := getOf[domain.Tenant](u, c.Request(), "/tenants/"+t); err != nil {
		return u.fail(c, err)
	}
	mv, err := u.metalView(c, metalForm{Tenant: t, Role: domain.RoleWorker, Registered: c.QueryParam("registered")})
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, MetalPage(u, viewerOf(c), mv))
}

// registerMachine creates a Machine through the API: a metal node group
// whose providerConfig selector matches its labels configures it.
func (u *UI) registerMachine(c echo.Context) error {
	t := c.Param("tenant")
	f := metalForm{Tenant: t, Name: strings.TrimSpace(c.FormValue("metadata.name")), Address: strings.TrimSpace(c.FormValue("spec.address")),
		Hostname: strings.TrimSpace(c.FormValue("spec.hostname")), NodeGroup: strings.TrimSpace(c.FormValue("spec.nodeGroup")),
		Role: strings.TrimSpace(c.FormValue("spec.role")), Labels: strings.TrimSpace(c.FormValue("metadata.labels")),
		InstallDisk: strings.TrimSpace(c.FormValue("installDisk"))}
	again := func(err error) error {
		switch domain.ReasonOf(err) {
		case domain.ReasonInvalid, domain.ReasonBadRequest, domain.ReasonConflict, domain.ReasonAlreadyExists:
		default:
			return u.fail(c, err)
		}
		f.Errors = toFormErrors(err, metalFormFields...)
		mv, verr := u.metalView(c, f)
		if verr != nil {
			return u.fail(c, verr)
		}
		if isHTMX(c) {
			return render(c, errorCode(err), metalRegisterForm(viewerOf(c), mv))
		}
		return render(c, errorCode(err), MetalPage(u, viewerOf(c), mv))
	}
	labels, err := parseLabels(f.Labels)
	if err != nil {
		return again(domain.NewInvalid(domain.MachineKind.Kind, f.Name, []domain.Cause{{Field: "metadata.labels", Type: domain.CauseInvalid, Message: err.Error()}}))
	}
	spec := map[string]any{"nodeGroup": f.NodeGroup, "role": f.Role, "address": f.Address}
	if f.Hostname != "" {
		spec["hostname"] = f.Hostname
	}
	meta := map[string]any{"name": f.Name, "tenant": t, "labels": labels}
	if f.InstallDisk != "" {
		if !strings.HasPrefix(f.InstallDisk, "/dev/") {
			return again(domain.NewInvalid(domain.MachineKind.Kind, f.Name, []domain.Cause{{Field: "installDisk", Type: domain.CauseInvalid,
				Message: fmt.Sprintf("%q must be a device path, e.g. /dev/nvme0n1", f.InstallDisk)}}))
		}
		meta["annotations"] = map[string]string{domain.AnnotationInstallDisk: f.InstallDisk}
	}
	obj := map[string]any{"apiVersion": domain.APIVersion, "kind": domain.MachineKind.Kind, "metadata": meta, "spec": spec}
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPost, Path: "/tenants/" + t + "/machines", Body: obj}, nil); err != nil {
		return again(err)
	}
	// A new URL, not only a new fragment: the page loads with the machine.
	target := "/ui/tenants/" + t + "/metal" + query("registered", f.Name) + "#registered"
	if isHTMX(c) {
		c.Response().Header().Set("HX-Redirect", target)
		return c.NoContent(http.StatusCreated)
	}
	return c.Redirect(http.StatusSeeOther, target)
}

// metalGroupSelector is a node group's providerConfig selector, "" when it
// has none.
func metalGroupSelector(ng domain.NodeGroup) string {
	var pc struct {
		Selector string `json:"selector"`
	}
	_ = jsonUnmarshal(ng.Spec.ProviderConfig, &pc)
	return pc.Selector
}

// selectedBy says whether m's group selects it: the group exists and its
// selector matches m's labels.
func selectedBy(m domain.Machine, ngs []domain.NodeGroup) string {
	for _, ng := range ngs {
		if ng.Metadata.Name != m.Spec.NodeGroup {
			continue
		}
		s := metalGroupSelector(ng)
		if s == "" {
			return "node group " + ng.Metadata.Name + " has no selector"
		}
		sel, err := domain.ParseSelector(s)
		if err != nil || !sel.Matches(m.Metadata.Labels) {
			return "not matched by " + ng.Metadata.Name + "'s selector " + s
		}
		return "selected by " + ng.Metadata.Name + " (" + s + ")"
	}
	return "node group " + m.Spec.NodeGroup + " does not exist"
}

func jsonUnmarshal(raw []byte, v any) error {
	if len(raw) == 0 {
		return nil
	}
	return json.Unmarshal(raw, v)
}
