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
// Who imports it: tests of the talos packages, the `emulated` provider and
// `rezusctl boot`. It depends on domain (for the error vocabulary) and on
// machinery; nothing in it reaches for handlers or the event store.
package emulator
