// Package emulator runs emulated Talos Linux nodes that serve the real Talos
// gRPC MachineService (machinery's generated server interfaces) over TLS, so
// the whole RezusCloud loop — apply a config, bootstrap, read health, upgrade —
// runs on one machine with no cloud account and no virtual machines.
//
// A node starts in maintenance mode (TLS with a self-signed certificate, no
// client certificate asked for) and answers only Version and
// ApplyConfiguration, like a Talos ISO booted without user data. Once a
// machine config is applied it "installs" and "boots", then serves mTLS with a
// server certificate issued from the config's OS CA (machine.ca) and enforces
// the Talos roles (os:admin, os:operator, os:reader) carried in the client
// certificate's Organization.
//
// The Emulator owns the nodes: it gives each its own address (a distinct
// loopback IP on port 50000 on Linux, else a port per node), reserves
// loopback IPs ahead of the nodes that boot on them (like a cloud's reserved
// IP, so a control plane's endpoint can go into its own config), shares etcd
// membership between the control planes of one cluster, injects faults, and
// persists its nodes and reservations in a directory so a restarted emulator
// brings them back at the same addresses. Handler exposes it over HTTP.
//
// A node tells the truth about what it holds: its status carries configHash
// (the hex SHA-256 of the exact config bytes it runs) and kubernetesVersion
// (the tag of machine.kubelet.image in that config), persisted like the rest.
// ApplyConfiguration on a configured node follows the Talos modes: REBOOT
// reboots into the config; NO_REBOOT applies it in place; STAGED keeps it for
// the next reboot (stagedConfigHash until then); TRY applies it in place and
// rolls back after TryModeTimeout (default 1 min), on a reboot or an emulator
// restart, unless another apply confirms it. AUTO applies in place when only
// hot-reloadable sections changed and reboots otherwise, and answers the mode
// it used (NO_REBOOT or REBOOT); NO_REBOOT and TRY refuse, with
// FailedPrecondition, a change that needs a reboot. The rule (needsReboot):
// the v1alpha1 documents are compared with machine.network, machine.kubelet,
// machine.nodeLabels, nodeTaints, nodeAnnotations, machine.certSANs,
// machine.install, cluster.apiServer, controllerManager, scheduler and
// proxy, and the PKI Talos rotates live (machine.ca, machine.acceptedCAs,
// machine.token, cluster.ca, cluster.acceptedCAs, cluster.aggregatorCA,
// cluster.serviceAccount, cluster.token and the encryption secrets) left
// out; any other difference (disks, type, the etcd CA, cluster identity,
// kernel, sysctls, …) needs a reboot, and other documents apply in place.
// A PKI change restarts the kubelet and the control-plane components (not
// etcd) with certificates from the new CAs, and apid's next TLS handshake
// uses the new trust and certificate. The
// refuseApply fault makes a node answer ApplyConfiguration with Unavailable
// until it is lifted, to test a caller's retry.
//
// Etcd membership is derived from the nodes: once a cluster is bootstrapped,
// its members are its configured control planes (joining by being
// configured), each with a member id stable across restarts, minus those that
// left (EtcdLeaveCluster) or were removed through another member
// (EtcdRemoveMemberByID). The last member cannot leave. A node out of etcd
// reports its etcd service Finished and unhealthy and answers EtcdStatus and
// EtcdMemberList with FailedPrecondition until a Reset wipes it. The leader is
// the member that holds the bootstrap flag while it is up (the flag passes to
// another member when its node leaves, is reset or is deleted), else the first
// member up by name. A deleted node simply stops being a member.
//
// Each bootstrapped cluster also has etcd data (etcd_data.go): keys with
// UTF-8 values and a store revision, 1 after bootstrap and +1 per write,
// persisted in the state dir. Tests read and write it over HTTP (Handler),
// pad its snapshots with filler to test large ones, and wipe it: the
// disaster in which every control plane loses its etcd data, after which the
// cluster is no longer bootstrapped, etcd shows "Preparing" (waiting for
// bootstrap) and EtcdMemberList, EtcdStatus and EtcdSnapshot answer
// FailedPrecondition, as every etcd call does where etcd does not run.
// EtcdSnapshot (os:admin, os:operator or os:etcd:backup) streams a member's
// snapshot in 1 MiB chunks: a deterministic format ending, like etcd's, in
// the SHA-256 of the bytes before it (etcd_snapshot.go). EtcdRecover
// (os:admin) uploads one to a control plane, checked as it arrives (damaged,
// truncated or oversized: InvalidArgument) and kept across restarts until a
// Reset; Bootstrap with recover_etcd then starts the cluster's etcd from it,
// with its keys and revision, and the other control planes join as after any
// bootstrap. As in Talos, Bootstrap answers AlreadyExists while the cluster
// holds etcd data (a recover on a healthy cluster included), and
// FailedPrecondition with recover_etcd but no upload.
//
// Beyond what RezusCloud calls, a configured node answers what the real
// talosctl's everyday commands call (docs/emulator.md has the list, and
// TestTalosctlConformance runs talosctl v1.13.0 against it): ServiceList with
// every field machined sets, per-boot Events (the boot, services, machine
// status, and the reboot, reset and upgrade sequences with the actor id of
// the call, which `--wait` follows), Memory, Containers, TimeService, Read of
// a few files (the boot id changes on every boot), ImageService (Pull records
// the image the upgrade installs from), StorageService.Disks (in maintenance
// mode too), and the COSI resource API (cosi.go): an in-memory state per boot
// with machinery's resource definitions, served read-only by the COSI
// runtime's protobuf server and rewritten, only where it changed, on every
// change of the node or of its cluster.
//
// Subpackages: emulator/kubecp runs the real Kubernetes control plane (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler) of a control-plane
// node as child processes; emulator/kubelet is every node's emulated kubelet
// against it; emulator/tfprovider is the `emulated` OpenTofu provider
// (served by cmd/terraform-provider-emulated) that makes machines and
// addresses through Handler's HTTP API; emulator/talostest boots an emulated
// tenant for tests.
//
// Who imports it: `rezuscloud serve --with-emulator`, `rezusctl boot` and
// tests (emulator/talostest). It is a room of its own: it depends on domain
// (for the error vocabulary), talos/etcdsnapshot and machinery; nothing in
// it reaches for the server's packages (domain/imports_test.go).
package emulator
