package handlers

import (
	"context"
	"errors"
	"log/slog"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/identity"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// Deps are the parts the API is built on.
type Deps struct {
	Store     *eventstore.Store
	Cache     *projections.Cache
	Projector Readiness
	Finalizer *projections.TenantFinalizer
	// Auth authenticates requests; when Identity is set it is used instead and
	// login, sessions, users' passwords and API tokens are served.
	Auth     Authenticator
	Identity *identity.Service
	// Audit records every mutating request and credential download and serves
	// /api/v1/audit; nil keeps no audit trail (tests that do not need one).
	Audit *eventstore.AuditLog
	Log   *slog.Logger

	// Automation issues NATS credentials for external automation; nil (an
	// external NATS cluster) answers those routes with a BadRequest saying so.
	Automation AutomationIssuer

	// Talos renders machine configs and credentials from each tenant's PKI and
	// checks ConfigPatches before they are stored; nil leaves the config,
	// talosconfig and kubeconfig routes out.
	Talos *talos.Service
	// ConfigDryRun asks nodes how they would take a config, for the impact
	// of a dry run; nil: the Talos API (talos.NodeAPI).
	ConfigDryRun talos.DryRunner
	// PlanChange plans a dry run's tenant or node group change with tofu
	// (apply.Worker.PlanChange); nil: impacts carry no plan.
	PlanChange ChangePlanner

	// KubeAccess keeps, in each tenant's cluster, the ClusterRoleBindings
	// of the groups per-user credentials carry (a *kubeclient.Clients, or
	// nothing for tenants without Kubernetes); nil keeps none.
	KubeAccess KubeAccess

	// State keeps Terraform state for /tfstate and the state API; nil answers
	// those routes with ServiceUnavailable.
	State *eventstore.StateStore

	// ApplyLogs and CancelApply serve applies' logs and stop runs; nil answers
	// those routes with ServiceUnavailable (no apply worker).
	ApplyLogs   ApplyLogs
	CancelApply ApplyCanceler

	// Health probes tenants through the Talos API for /tenants/{t}/health;
	// nil answers that route with ServiceUnavailable.
	Health TenantHealthProber

	// MachineLogs reads machines' logs and kernel messages through the Talos
	// API for /tenants/{t}/machines/{m}/logs and /dmesg; nil answers those
	// routes with ServiceUnavailable.
	MachineLogs MachineLogReader

	// Backup writes archives of the server's data for GET
	// /api/v1/admin/backup (admin only); nil answers that route with
	// ServiceUnavailable.
	Backup Backuper
	// EtcdBackups opens etcd backups' objects for their snapshot download
	// and for the check of a restore; nil answers those with ServiceUnavailable.
	EtcdBackups EtcdBackupObjects
	// Replicas says which replicas run and at which schema levels, for
	// /version and /api/v1/replicas; nil: this replica alone.
	Replicas ReplicaViewer
	// Autoscaler issues, lists and revokes the cluster-autoscaler's client
	// certificates of a tenant (/tenants/{t}/autoscaler/...); nil answers
	// those routes with ServiceUnavailable (no --autoscaler-listen).
	Autoscaler AutoscalerCertificates
}

// KubeAccess keeps the access RBAC of a tenant's cluster.
type KubeAccess interface {
	EnsureAccessRBAC(ctx context.Context, tenant string) error
}

// Validate reports every part of d that the API cannot be built without, or
// that is set in a way that would be silently ignored. The optional parts
// (Audit, Automation, Talos, State, ApplyLogs, CancelApply, Health,
// MachineLogs, Backup) leave their routes out or answer ServiceUnavailable when nil.
func (d Deps) Validate() error {
	var errs []error
	if d.Store == nil {
		errs = append(errs, errors.New("handlers: Deps.Store is required"))
	}
	if d.Cache == nil {
		errs = append(errs, errors.New("handlers: Deps.Cache is required"))
	}
	switch {
	case d.Auth == nil && d.Identity == nil:
		// The API would answer every authenticated route 401.
		errs = append(errs, errors.New("handlers: Deps.Identity or Deps.Auth is required to authenticate requests"))
	case d.Auth != nil && d.Identity != nil:
		errs = append(errs, errors.New("handlers: Deps.Auth and Deps.Identity are both set; Identity authenticates when set, so leave Auth out"))
	}
	return errors.Join(errs...)
}
