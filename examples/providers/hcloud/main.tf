# One node group of a RezusCloud tenant on Hetzner Cloud, as a module
# provider: RezusCloud calls this module once per node group and reads the
# machines it built from output "machines" (outputs.tf).
#
# What exists, and when. A group that is gone is still called, with no
# machines and role "", so that tofu destroys what the call built: every
# resource below is conditional so that such a call holds nothing.
#
#   - servers, one per machine (for_each = var.machines);
#   - the group's private network and subnet, and its firewall, while the
#     group has machines (or keeps a load balancer, which sits on the
#     network);
#   - for a control-plane group of a tenant that declares no endpoint: a
#     load balancer whose public IPv4 is the tenant's control-plane endpoint
#     (output "endpoint"), with services for 6443 and 50000 and one target
#     per control-plane server.
#
# The load balancer's count reads var.role and var.endpoint only, never
# var.machines: the machines' configs are made with the endpoint (the root
# replaces a placeholder in them with module.<call>.endpoint), so an
# endpoint that depended on the machines would be a cycle. A consequence:
# a control-plane group scaled to zero keeps its load balancer, and with it
# the tenant's endpoint address, until the group is removed.

locals {
  make_endpoint = var.role == "controlplane" && var.endpoint == ""
  has_machines  = length(var.machines) > 0
  # The network outlives the machines while the load balancer sits on it.
  make_network = local.has_machines || local.make_endpoint

  # A group's providerConfig overrides the Provider-wide defaults.
  server_type = try(tostring(var.provider_config.serverType), var.server_type)
  location    = try(tostring(var.provider_config.location), var.location)
  image       = try(tostring(var.provider_config.image), lookup(var.images_by_schematic, var.schematic_id, var.image))
  network_zone = var.network_zone != "" ? var.network_zone : lookup({
    fsn1 = "eu-central", nbg1 = "eu-central", hel1 = "eu-central",
    ash  = "us-east", hil = "us-west", sin = "ap-southeast",
  }, local.location, "eu-central")

  # Who the firewall admits on every port: the group's servers.
  member_ips = flatten([for s in hcloud_server.machine : ["${s.ipv4_address}/32", s.ipv6_network]])

  # Resource names are unique per Hetzner project: tenant and group make
  # them so (the servers are named by RezusCloud, tenant-prefixed).
  name = "${var.tenant}-${var.node_group}"
  labels = {
    "rezuscloud.io/tenant"     = var.tenant
    "rezuscloud.io/node-group" = var.node_group
    "rezuscloud.io/role"       = var.role
  }
  # The servers also say which schematic they were built for (a label
  # value holds 63 characters: the ID's first 63 of 64 hex digits).
  server_labels = merge(local.labels, var.schematic_id == "" ? {} : { "rezuscloud.io/schematic" = substr(var.schematic_id, 0, 63) })
}

resource "hcloud_network" "group" {
  count    = local.make_network ? 1 : 0
  name     = local.name
  ip_range = var.network_ip_range
  labels   = local.labels
}

resource "hcloud_network_subnet" "group" {
  count        = local.make_network ? 1 : 0
  network_id   = hcloud_network.group[0].id
  type         = "cloud"
  network_zone = local.network_zone
  ip_range     = cidrsubnet(var.network_ip_range, 8, 1)
}

resource "hcloud_server" "machine" {
  for_each    = var.machines
  name        = each.value.hostname
  image       = local.image
  server_type = local.server_type
  location    = local.location
  labels      = local.server_labels
  # Talos reads its machine config from the user data (its hcloud platform).
  # Hetzner caps user data at 32 KiB.
  user_data = each.value.config

  public_net {
    ipv4_enabled = true
    ipv6_enabled = true
  }

  network {
    network_id = hcloud_network.group[0].id
    # Without it tofu detaches and re-attaches the network on every apply
    # (hetznercloud/terraform-provider-hcloud#650).
    alias_ips = []
  }

  # A server created beside its subnet may fail to attach to the network.
  depends_on = [hcloud_network_subnet.group]

  # Day 0 only: RezusCloud applies every later config change and upgrade
  # through the Talos API, so neither a new config nor a new image rebuilds
  # a machine.
  lifecycle {
    ignore_changes = [user_data, image]
  }
}

# The firewall admits 6443 and 50000 from var.allowed_cidrs and everything
# from the group's own servers, and applies by label to every server of the
# tenant. Each group's call makes one, and Hetzner applies the union of a
# server's firewalls: so every server of the tenant admits every other (etcd,
# kubelet, trustd, the CNI), across groups, which no single group's call
# could express. Traffic on the private networks is not filtered. Hetzner
# caps the firewalls that apply to one server, which bounds the groups of
# one tenant on this module.
resource "hcloud_firewall" "group" {
  count  = local.has_machines ? 1 : 0
  name   = local.name
  labels = local.labels

  dynamic "rule" {
    for_each = length(var.allowed_cidrs) > 0 ? { kubernetes = "6443", talos = "50000" } : {}
    content {
      description = "${rule.key} API"
      direction   = "in"
      protocol    = "tcp"
      port        = rule.value
      source_ips  = var.allowed_cidrs
    }
  }

  dynamic "rule" {
    for_each = ["tcp", "udp"]
    content {
      description = "the group's servers, ${rule.value}"
      direction   = "in"
      protocol    = rule.value
      port        = "any"
      source_ips  = local.member_ips
    }
  }

  rule {
    description = "the group's servers, icmp"
    direction   = "in"
    protocol    = "icmp"
    source_ips  = local.member_ips
  }

  apply_to {
    label_selector = "rezuscloud.io/tenant=${var.tenant}"
  }
}

resource "hcloud_load_balancer" "endpoint" {
  count              = local.make_endpoint ? 1 : 0
  name               = local.name
  load_balancer_type = var.load_balancer_type
  location           = local.location
  labels             = local.labels
}

resource "hcloud_load_balancer_network" "endpoint" {
  count            = local.make_endpoint ? 1 : 0
  load_balancer_id = hcloud_load_balancer.endpoint[0].id
  subnet_id        = hcloud_network_subnet.group[0].id
}

resource "hcloud_load_balancer_service" "endpoint" {
  for_each         = local.make_endpoint ? { kubernetes = 6443, talos = 50000 } : {}
  load_balancer_id = hcloud_load_balancer.endpoint[0].id
  protocol         = "tcp"
  listen_port      = each.value
  destination_port = each.value
}

# The targets are reached on the private network, so the firewall (which
# filters public interfaces only) need not admit the load balancer.
resource "hcloud_load_balancer_target" "control_plane" {
  for_each         = local.make_endpoint ? toset(keys(var.machines)) : toset([])
  type             = "server"
  load_balancer_id = hcloud_load_balancer.endpoint[0].id
  server_id        = hcloud_server.machine[each.key].id
  use_private_ip   = true

  depends_on = [hcloud_load_balancer_network.endpoint]
}
