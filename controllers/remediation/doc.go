// Package remediation replaces unhealthy machines by itself: for every
// node group that declares spec.remediation, it probes the tenant's
// machines on an interval (through the health service: the Talos API, etcd
// and the Nodes of the cluster's Kubernetes API), decides with
// domain.DecideRemediation (pure, table-tested: timeouts, maxUnhealthy, one
// machine per group and one control plane per tenant at a time, etcd
// quorum, backoff after failures), records the group's RemediationAllowed
// condition, and creates a Remediation for the machine to replace. The apply
// worker (controllers/apply/remediate.go) carries it out: drain, etcd member
// removal, Node deletion, `tofu apply -replace`. This controller then
// watches the new machine: Succeeded once it is healthy, Failed when it is
// not within startupTimeout.
//
// Probing on an interval is the one background probe of the server, and
// only for groups that ask for remediation: replacing a dead machine needs
// someone to notice it.
//
// It imports domain, eventstore, projections and internal/controller; the
// health service is reached through Prober.
package remediation
