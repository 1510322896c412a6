package handlers_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestBadInputs sends malformed and invalid requests and checks each gets the
// right code, reason and field at fault, and that none of them stored anything.
func TestBadInputs(t *testing.T) {
	s := newStack(t).withProvider()
	ten := s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))
	s.mustCreate("/api/v1/tenants/acme/nodegroups", nodeGroupBody("workers", 1))
	rv := ten.Metadata.ResourceVersion
	before := s.lastSeq()
	beforeList := s.do(http.MethodGet, "/api/v1/tenants", nil).Body

	big := `{"metadata":{"name":"big","annotations":{"a":"` + strings.Repeat("x", 1<<20) + `"}},"spec":{}}`
	ng := func(spec string) string { return `{"metadata":{"name":"ng"},"spec":` + spec + `}` }
	tenant := func(spec string) string { return `{"metadata":{"name":"t2"},"spec":` + spec + `}` }

	cases := []struct {
		name    string
		method  string
		path    string
		body    string
		headers []string
		code    int
		reason  domain.Reason
		field   string // a cause field expected in details.causes ("" = no causes checked)
	}{
		{"malformed json", "POST", "/api/v1/tenants", `{"metadata":`, nil, 400, domain.ReasonBadRequest, ""},
		{"trailing garbage", "POST", "/api/v1/tenants", `{"metadata":{"name":"x"}} {}`, nil, 400, domain.ReasonBadRequest, ""},
		{"empty body", "POST", "/api/v1/tenants", ``, nil, 400, domain.ReasonBadRequest, ""},
		{"unknown top-level field", "POST", "/api/v1/tenants", `{"metadata":{"name":"x"},"sepc":{}}`, nil, 400, domain.ReasonBadRequest, "sepc"},
		{"unknown metadata field", "POST", "/api/v1/tenants", `{"metadata":{"name":"x","nmae":"y"}}`, nil, 400, domain.ReasonBadRequest, "metadata.nmae"},
		{"unknown spec field", "POST", "/api/v1/tenants", tenant(`{"talosVersoin":"v1.13.0"}`), nil, 400, domain.ReasonBadRequest, "spec.talosVersoin"},
		{"backup interval too short", "POST", "/api/v1/tenants", tenant(`{"etcdBackup":{"interval":"4m"}}`), nil, 422, domain.ReasonInvalid, "spec.etcdBackup.interval"},
		{"backup interval not a duration", "POST", "/api/v1/tenants", tenant(`{"etcdBackup":{"interval":"daily"}}`), nil, 422, domain.ReasonInvalid, "spec.etcdBackup.interval"},
		{"backup keep too many", "POST", "/api/v1/tenants", tenant(`{"etcdBackup":{"interval":"6h","keep":1001}}`), nil, 422, domain.ReasonInvalid, "spec.etcdBackup.keep"},
		{"backup keep negative", "PATCH", "/api/v1/tenants/acme", `{"spec":{"etcdBackup":{"interval":"6h","keep":-1}}}`, []string{"Content-Type", "application/merge-patch+json"}, 422, domain.ReasonInvalid, "spec.etcdBackup.keep"},
		{"backup keep without interval", "POST", "/api/v1/tenants", tenant(`{"etcdBackup":{"keep":3}}`), nil, 422, domain.ReasonInvalid, "spec.etcdBackup.interval"},
		{"backup bad name", "POST", "/api/v1/tenants/acme/etcdbackups", `{"metadata":{"name":"Bad_Name"}}`, nil, 422, domain.ReasonInvalid, "metadata.name"},
		{"backup unknown trigger", "POST", "/api/v1/tenants/acme/etcdbackups", `{"metadata":{"name":"b"},"spec":{"trigger":"cron"}}`, nil, 422, domain.ReasonInvalid, "spec.trigger"},
		{"restore without backup", "POST", "/api/v1/tenants/acme/restores", `{"metadata":{"name":"r"},"spec":{}}`, nil, 422, domain.ReasonInvalid, "spec.backup"},
		{"restore of a missing backup", "POST", "/api/v1/tenants/acme/restore", `{"backup":"nope"}`, nil, 422, domain.ReasonInvalid, "spec.backup"},
		{"restore with a bad name", "POST", "/api/v1/tenants/acme/restore", `{"backup":"Nope!"}`, nil, 422, domain.ReasonInvalid, "backup"},
		{"restore join deadline too short", "POST", "/api/v1/tenants/acme/restore", `{"backup":"b1","deadlines":{"join":"5s"}}`, nil, 422, domain.ReasonInvalid, "deadlines.join"},
		{"restore check deadline too long", "POST", "/api/v1/tenants/acme/restores", `{"metadata":{"name":"r"},"spec":{"backup":"b1","deadlines":{"check":"48h"}}}`, nil, 422, domain.ReasonInvalid, "spec.deadlines.check"},
		{"unknown nested spec field", "POST", "/api/v1/tenants", tenant(`{"network":{"podSubnet":["10.0.0.0/16"]}}`), nil, 400, domain.ReasonBadRequest, "spec.network.podSubnet"},
		{"duplicate metadata field", "POST", "/api/v1/tenants", `{"metadata":{"name":"x","name":"y"}}`, nil, 400, domain.ReasonBadRequest, "metadata.name"},
		{"duplicate spec field", "POST", "/api/v1/tenants", tenant(`{"talosVersion":"v1.13.0","talosVersion":"v1.12.0"}`), nil, 400, domain.ReasonBadRequest, "spec.talosVersion"},
		{"remediation without unhealthyAfter", "POST", "/api/v1/tenants/acme/nodegroups", ng(`{"role":"worker","count":3,"provider":"emu","remediation":{}}`), nil, 422, domain.ReasonInvalid, "spec.remediation.unhealthyAfter"},
		{"remediation maxUnhealthy neither count nor percentage", "POST", "/api/v1/tenants/acme/nodegroups", ng(`{"role":"worker","count":3,"provider":"emu","remediation":{"unhealthyAfter":"5m","maxUnhealthy":"half"}}`), nil, 422, domain.ReasonInvalid, "spec.remediation.maxUnhealthy"},
		{"wrong type for count", "POST", "/api/v1/tenants/acme/nodegroups", ng(`{"role":"worker","count":"3","provider":"emu"}`), nil, 400, domain.ReasonBadRequest, "spec.count"},
		{"wrong type for labels", "POST", "/api/v1/tenants", `{"metadata":{"name":"x","labels":["a"]}}`, nil, 400, domain.ReasonBadRequest, "metadata.labels"},
		{"missing name", "POST", "/api/v1/tenants", `{"metadata":{},"spec":{}}`, nil, 422, domain.ReasonInvalid, "metadata.name"},
		{"upper-case name", "POST", "/api/v1/tenants", `{"metadata":{"name":"Acme"}}`, nil, 422, domain.ReasonInvalid, "metadata.name"},
		{"dotted name", "POST", "/api/v1/tenants", `{"metadata":{"name":"a.b"}}`, nil, 422, domain.ReasonInvalid, "metadata.name"},
		{"name too long", "POST", "/api/v1/tenants", `{"metadata":{"name":"` + strings.Repeat("a", 64) + `"}}`, nil, 422, domain.ReasonInvalid, "metadata.name"},
		{"bad label key", "POST", "/api/v1/tenants", `{"metadata":{"name":"x","labels":{"-bad":"v"}}}`, nil, 422, domain.ReasonInvalid, "metadata.labels[-bad]"},
		{"bad talos version", "POST", "/api/v1/tenants", tenant(`{"talosVersion":"latest"}`), nil, 422, domain.ReasonInvalid, "spec.talosVersion"},
		{"bad pod cidr", "POST", "/api/v1/tenants", tenant(`{"network":{"podSubnets":["10.0.0.0/33"]}}`), nil, 422, domain.ReasonInvalid, "spec.network.podSubnets[0]"},
		{"overlapping subnets", "POST", "/api/v1/tenants", tenant(`{"network":{"podSubnets":["10.0.0.0/8"],"serviceSubnets":["10.96.0.0/12"]}}`), nil, 422, domain.ReasonInvalid, "spec.network.serviceSubnets[0]"},
		{"http endpoint", "POST", "/api/v1/tenants", tenant(`{"controlPlane":{"endpoint":"http://1.2.3.4:6443"}}`), nil, 422, domain.ReasonInvalid, "spec.controlPlane.endpoint"},
		{"count too big", "POST", "/api/v1/tenants/acme/nodegroups", ng(`{"role":"worker","count":1001,"provider":"emu"}`), nil, 422, domain.ReasonInvalid, "spec.count"},
		{"even control plane", "POST", "/api/v1/tenants/acme/nodegroups", ng(`{"role":"controlplane","count":2,"provider":"emu"}`), nil, 422, domain.ReasonInvalid, "spec.count"},
		{"unknown role", "POST", "/api/v1/tenants/acme/nodegroups", ng(`{"role":"master","count":1,"provider":"emu"}`), nil, 422, domain.ReasonInvalid, "spec.role"},
		{"missing provider", "POST", "/api/v1/tenants/acme/nodegroups", ng(`{"role":"worker","count":1}`), nil, 422, domain.ReasonInvalid, "spec.provider"},
		{"bad provider type", "POST", "/api/v1/providers", `{"metadata":{"name":"p"},"spec":{"type":"aws"}}`, nil, 422, domain.ReasonInvalid, "spec.type"},
		{"patch target name for all", "POST", "/api/v1/tenants/acme/configpatches", `{"metadata":{"name":"p"},"spec":{"target":{"kind":"all","name":"x"},"patch":"a: b"}}`, nil, 422, domain.ReasonInvalid, "spec.target.name"},
		{"tenant in body differs from url", "POST", "/api/v1/tenants/acme/nodegroups", `{"metadata":{"name":"ng","tenant":"other"},"spec":{"role":"worker","count":1,"provider":"emu"}}`, nil, 422, domain.ReasonInvalid, "metadata.tenant"},
		{"wrong kind", "POST", "/api/v1/tenants", `{"kind":"NodeGroup","metadata":{"name":"x"}}`, nil, 422, domain.ReasonInvalid, "kind"},
		{"wrong apiVersion", "POST", "/api/v1/tenants", `{"apiVersion":"v2","metadata":{"name":"x"}}`, nil, 422, domain.ReasonInvalid, "apiVersion"},
		{"body too large", "POST", "/api/v1/tenants", big, nil, 413, domain.ReasonRequestEntityTooLarge, ""},
		{"wrong content type", "POST", "/api/v1/tenants", `{"metadata":{"name":"x"}}`, []string{"Content-Type", "text/plain"}, 415, domain.ReasonUnsupportedMediaType, ""},
		{"put without resourceVersion", "PUT", "/api/v1/tenants/acme", `{"metadata":{"name":"acme"},"spec":{}}`, nil, 422, domain.ReasonInvalid, "metadata.resourceVersion"},
		{"put with junk resourceVersion", "PUT", "/api/v1/tenants/acme", `{"metadata":{"name":"acme","resourceVersion":"abc"},"spec":{}}`, nil, 422, domain.ReasonInvalid, "metadata.resourceVersion"},
		{"put renaming", "PUT", "/api/v1/tenants/acme", `{"metadata":{"name":"other","resourceVersion":"` + rv + `"},"spec":{}}`, nil, 422, domain.ReasonInvalid, "metadata.name"},
		{"put stale version", "PUT", "/api/v1/tenants/acme", `{"metadata":{"name":"acme","resourceVersion":"999999"},"spec":{"talosVersion":"v1.12.0"}}`, nil, 409, domain.ReasonConflict, ""},
		{"put missing object", "PUT", "/api/v1/tenants/nope", `{"metadata":{"name":"nope","resourceVersion":"1"},"spec":{}}`, nil, 404, domain.ReasonNotFound, ""},
		{"patch wrong content type", "PATCH", "/api/v1/tenants/acme", `{"spec":{}}`, []string{"Content-Type", "application/json"}, 415, domain.ReasonUnsupportedMediaType, ""},
		{"patch not an object", "PATCH", "/api/v1/tenants/acme", `[1,2]`, nil, 400, domain.ReasonBadRequest, ""},
		{"patch to invalid spec", "PATCH", "/api/v1/tenants/acme/nodegroups/workers", `{"spec":{"count":-1}}`, nil, 422, domain.ReasonInvalid, "spec.count"},
		{"patch unknown field", "PATCH", "/api/v1/tenants/acme", `{"spec":{"bogus":true}}`, nil, 400, domain.ReasonBadRequest, "spec.bogus"},
		{"status with bad condition", "PUT", "/api/v1/tenants/acme/status", `{"metadata":{"name":"acme","resourceVersion":"` + rv + `"},"status":{"conditions":[{"type":"Ready","status":"Maybe"}]}}`, nil, 422, domain.ReasonInvalid, "status.conditions[0].status"},
		{"invalid name in url", "GET", "/api/v1/tenants/Bad.Name", ``, nil, 400, domain.ReasonBadRequest, "metadata.name"},
		{"invalid tenant in url", "POST", "/api/v1/tenants/a*b/nodegroups", ng(`{"role":"worker","count":1,"provider":"emu"}`), nil, 400, domain.ReasonBadRequest, "metadata.tenant"},
		{"object in missing tenant", "POST", "/api/v1/tenants/nope/nodegroups", ng(`{"role":"worker","count":1,"provider":"emu"}`), nil, 404, domain.ReasonNotFound, ""},
		{"bad label selector", "GET", "/api/v1/tenants?labelSelector=a+in+(", ``, nil, 400, domain.ReasonBadRequest, "labelSelector"},
		{"bad limit", "GET", "/api/v1/tenants?limit=-1", ``, nil, 400, domain.ReasonBadRequest, "limit"},
		{"bad continue", "GET", "/api/v1/tenants?limit=1&continue=zzz", ``, nil, 400, domain.ReasonBadRequest, "continue"},
		{"bad watch version", "GET", "/api/v1/tenants?watch=true&resourceVersion=x", ``, nil, 400, domain.ReasonBadRequest, "resourceVersion"},
		{"delete missing", "DELETE", "/api/v1/tenants/nope", ``, nil, 404, domain.ReasonNotFound, ""},
		{"delete with stale precondition", "DELETE", "/api/v1/tenants/acme?resourceVersion=999999", ``, nil, 409, domain.ReasonConflict, ""},
		{"method not allowed", "POST", "/api/v1/tenants/acme", `{}`, nil, 405, domain.ReasonMethodNotAllowed, ""},
		{"idempotency key too long", "POST", "/api/v1/tenants", `{"metadata":{"name":"k"}}`, []string{"Idempotency-Key", strings.Repeat("k", 256)}, 400, domain.ReasonBadRequest, "Idempotency-Key"},
		{"idempotency key with spaces", "POST", "/api/v1/tenants", `{"metadata":{"name":"k"}}`, []string{"Idempotency-Key", "a b"}, 400, domain.ReasonBadRequest, "Idempotency-Key"},
	}
	require.GreaterOrEqual(t, len(cases), 25)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(tc.method, tc.path, tc.body, tc.headers...)
			require.Equal(t, tc.code, r.Code, string(r.Body))
			st := r.status(t)
			require.Equal(t, "Status", st.Kind)
			require.Equal(t, "Failure", st.Status)
			require.Equal(t, tc.code, st.Code)
			require.Equal(t, tc.reason, st.Reason)
			require.NotEmpty(t, st.Message)
			if tc.field != "" {
				require.NotNil(t, st.Details, string(r.Body))
				var fields []string
				for _, c := range st.Details.Causes {
					fields = append(fields, c.Field)
				}
				require.Contains(t, fields, tc.field, string(r.Body))
			}
		})
	}
	require.Equal(t, before, s.lastSeq(), "no bad request may append an event")
	require.JSONEq(t, string(beforeList), string(s.do(http.MethodGet, "/api/v1/tenants", nil).Body))
}

// TestSeveralBadFieldsAtOnce checks validation reports every bad field in one answer.
func TestSeveralBadFieldsAtOnce(t *testing.T) {
	s := newStack(t)
	r := s.do(http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"x"},"spec":{"talosVersion":"nope","kubernetesVersion":"1.x",
		"network":{"podSubnets":["bad"],"dnsDomain":"Not_Valid"}}}`)
	require.Equal(t, http.StatusUnprocessableEntity, r.Code)
	var fields []string
	for _, c := range r.status(t).Details.Causes {
		fields = append(fields, c.Field)
	}
	require.ElementsMatch(t, []string{"spec.talosVersion", "spec.kubernetesVersion", "spec.network.podSubnets[0]", "spec.network.dnsDomain"}, fields)
}
