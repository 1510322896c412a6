package webui

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

func (s *uiStack) createOpenStackProvider(name string) {
	s.t.Helper()
	s.create("/providers", map[string]any{"metadata": map[string]any{"name": name},
		"spec": map[string]any{"type": "openstack", "config": map[string]any{"authURL": "https://keystone.example.com:5000/v3"}}})
}

func TestProviderConfigFields(t *testing.T) {
	s := newUIStack(t)
	s.createOpenStackProvider("os")
	edit := s.signIn("erin", "edit")

	p := edit.hxGet("/ui/provider-config-fields?form=tenant-create&provider=os")
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	require.Contains(t, p.Body, `data-provider-type="openstack"`)
	for _, key := range []string{"flavor", "image", "network", "subnetID", "securityGroups", "configDrive", "installDisk"} {
		require.Regexp(t, `for="tenant-create-pc-`+key+`"[\s\S]*?id="tenant-create-pc-`+key+`" [^>]*name="providerConfig.`+key+`"`, p.Body, key)
	}
	require.Regexp(t, `flavor</span> <span[^>]*>\(required\)`, p.Body)

	// The tenants page renders the first provider's fields without a script.
	page := edit.get("/ui/tenants")
	require.Contains(t, page.Body, `id="tenant-create-pc-flavor"`)
}

// TestCreateTenantOpenStack creates a tenant on an OpenStack provider from
// the form: the groups' providerConfig holds the fields and the API accepts
// them; a refused config is shown at its fields before any tenant exists.
func TestCreateTenantOpenStack(t *testing.T) {
	s := newUIStack(t)
	s.createOpenStackProvider("os")
	edit := s.signIn("erin", "edit")
	edit.get("/ui/tenants")

	form := url.Values{"metadata.name": {"cloud"}, "provider": {"os"}, "controlPlanes": {"1"}, "workers": {"2"},
		"providerConfig.flavor": {"m1.large"}, "providerConfig.network": {"private"},
		"providerConfig.subnetID": {"not-a-uuid"}, "providerConfig.securityGroups": {"talos, default"}, "providerConfig.configDrive": {"true"}}
	p := edit.hx(http.MethodPost, "/ui/tenants", form)
	require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
	require.Regexp(t, `id="tenant-create-pc-image"[\s\S]*?data-field-error="spec.providerConfig.image">required`, p.Body)
	require.Contains(t, p.Body, `data-field-error="spec.providerConfig.subnetID">&#34;not-a-uuid&#34; must be a subnet id`)
	require.Contains(t, p.Body, `value="m1.large"`) // what was typed is kept
	require.Regexp(t, `name="providerConfig.configDrive" value="true" checked`, p.Body)
	code, _ := s.apiRaw(http.MethodGet, "/tenants/cloud", nil)
	require.Equal(t, http.StatusNotFound, code, "no tenant is left behind")

	form.Set("providerConfig.image", "talos-v1.13.0")
	form.Set("providerConfig.subnetID", "3f1e2d4c-5b6a-4798-8a9b-0c1d2e3f4a5b")
	p = edit.hx(http.MethodPost, "/ui/tenants", form)
	require.Equal(t, http.StatusCreated, p.Code, p.Body)
	for _, g := range []string{"controlplane", "workers"} {
		ng := s.nodeGroup("cloud", g)
		var pc map[string]any
		require.NoError(t, json.Unmarshal(ng.Spec.ProviderConfig, &pc))
		require.Equal(t, map[string]any{"flavor": "m1.large", "image": "talos-v1.13.0", "network": "private",
			"subnetID": "3f1e2d4c-5b6a-4798-8a9b-0c1d2e3f4a5b", "securityGroups": []any{"talos", "default"}, "configDrive": true}, pc, g)
	}
}

func TestCreateTenantModuleProviderConfig(t *testing.T) {
	s := newUIStack(t)
	createModuleProvider(t, s, "mod", "locals {\n  a = 1\n}\n")
	edit := s.signIn("erin", "edit")
	edit.get("/ui/tenants")

	p := edit.hxGet("/ui/provider-config-fields?form=tenant-create&provider=mod")
	require.Contains(t, p.Body, `id="tenant-create-pc-raw" name="providerConfig"`)

	form := url.Values{"metadata.name": {"modded"}, "provider": {"mod"}, "controlPlanes": {"1"}, "workers": {"0"},
		"providerConfig": {"size: [unclosed"}}
	p = edit.hx(http.MethodPost, "/ui/tenants", form)
	require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
	require.Regexp(t, `data-field-error="spec.providerConfig">is neither YAML nor JSON`, p.Body)
	require.Contains(t, p.Body, "size: [unclosed</textarea>")

	form.Set("providerConfig", "- a\n- b")
	p = edit.hx(http.MethodPost, "/ui/tenants", form)
	require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
	require.Contains(t, p.Body, `data-field-error="spec.providerConfig">must be an object`)

	form.Set("providerConfig", "size: small\ninstallDisk: 3")
	p = edit.hx(http.MethodPost, "/ui/tenants", form)
	require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
	require.Contains(t, p.Body, `data-field-error="spec.providerConfig">must be a string`)

	form.Set("providerConfig", "size: small\ntags: [a, b]\ninstallDisk: /dev/vdb")
	p = edit.hx(http.MethodPost, "/ui/tenants", form)
	require.Equal(t, http.StatusCreated, p.Code, p.Body)
	var pc map[string]any
	require.NoError(t, json.Unmarshal(s.nodeGroup("modded", "controlplane").Spec.ProviderConfig, &pc))
	require.Equal(t, map[string]any{"size": "small", "tags": []any{"a", "b"}, "installDisk": "/dev/vdb"}, pc)
}

func TestAddNodeGroupProviderConfig(t *testing.T) {
	s := newUIStack(t)
	s.acme()
	s.createOpenStackProvider("os")
	edit := s.signIn("erin", "edit")
	page := edit.get("/ui/tenants/acme")
	require.Contains(t, page.Body, `id="nodegroup-add-provider-config"`)

	p := edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups", url.Values{"metadata.name": {"big"}, "spec.role": {"worker"},
		"spec.count": {"1"}, "spec.provider": {"os"}, "providerConfig.flavor": {"m1.xlarge"}})
	require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
	require.Contains(t, p.Body, `data-field-error="spec.providerConfig.image">required`)
	require.Contains(t, p.Body, `id="nodegroup-add-pc-flavor" name="providerConfig.flavor" value="m1.xlarge"`)

	p = edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups", url.Values{"metadata.name": {"big"}, "spec.role": {"worker"},
		"spec.count": {"1"}, "spec.provider": {"os"}, "providerConfig.flavor": {"m1.xlarge"}, "providerConfig.image": {"talos"},
		"providerConfig.network": {"private"}})
	require.Equal(t, http.StatusCreated, p.Code, p.Body)
	var pc map[string]any
	require.NoError(t, json.Unmarshal(s.nodeGroup("acme", "big").Spec.ProviderConfig, &pc))
	require.Equal(t, map[string]any{"flavor": "m1.xlarge", "image": "talos", "network": "private"}, pc)
}
