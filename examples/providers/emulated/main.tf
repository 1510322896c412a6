# A module provider: the machines of one node group, built on the Talos node
# emulator through the `emulated` OpenTofu provider. RezusCloud calls this
# module once per node group that names the Provider, with the inputs of
# variables.tf, and reads the machines output (outputs.tf).

terraform {
  required_providers {
    emulated = {
      source  = "rezuscloud/emulated"
      version = "0.1.0"
    }
  }
}

# A module provider is self-contained: it configures its providers itself,
# here from its own variable.
provider "emulated" {
  endpoint = var.emulator
}

locals {
  # A control plane of a tenant that declares no endpoint gets an address
  # reserved for it, which its first machine boots on. It must not depend on
  # var.machines: their configs are made with it.
  make_endpoint = var.role == "controlplane" && var.endpoint == ""
  first_machine = length(var.machines) > 0 ? sort(keys(var.machines))[0] : ""
}

resource "emulated_address" "endpoint" {
  count = local.make_endpoint ? 1 : 0
  name  = "${var.tenant}-${var.node_group}-endpoint"
}

resource "emulated_machine" "machine" {
  for_each  = var.machines
  name      = each.value.hostname
  cluster   = var.tenant
  user_data = each.value.config
  address   = local.make_endpoint && each.key == local.first_machine ? emulated_address.endpoint[0].address : null

  # Day 0 only: RezusCloud applies later config changes and upgrades through
  # the Talos API, so a new config must not rebuild the machine.
  lifecycle {
    ignore_changes = [user_data]
  }
}
