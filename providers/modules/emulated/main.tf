# The built-in "emulated" provider type, written as a module provider: the
# machines of one node group on the Talos node emulator. RezusCloud ships it
# embedded (tfrunner/modules/emulated); it is also the example to copy for a
# module provider of your own (docs/providers.md gives the contract).

terraform {
  required_providers {
    emulated = {
      source  = "rezuscloud/emulated"
      version = "0.1.0"
    }
  }
}

# The provider is configured here, from the module's own variable: a module
# provider is self-contained.
provider "emulated" {
  endpoint = var.emulator
}

locals {
  # The control plane of a tenant that declares no endpoint gets an address
  # reserved for it (as a cloud's reserved IP or load balancer), which the
  # first control-plane machine boots on. It must not depend on
  # var.machines: the machines' configs are made with it.
  make_endpoint = var.role == "controlplane" && var.endpoint == ""
  first_machine = length(var.machines) > 0 ? sort(keys(var.machines))[0] : ""
}

resource "emulated_address" "endpoint" {
  count = local.make_endpoint ? 1 : 0
  name  = "${var.tenant}-endpoint"
}

resource "emulated_machine" "machine" {
  for_each  = var.machines
  name      = each.value.hostname
  cluster   = var.tenant
  user_data = each.value.config
  address   = local.make_endpoint && each.key == local.first_machine ? emulated_address.endpoint[0].address : null

  # Day 0 only: RezusCloud applies every later config change and upgrade
  # through the Talos API, so a new config never rebuilds a machine.
  lifecycle {
    ignore_changes = [user_data]
  }
}
