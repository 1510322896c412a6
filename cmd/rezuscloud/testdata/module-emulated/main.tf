# A module provider written by a user, on the emulated TF provider: what the
# e2e test builds a cluster with (the built-in emulated type is a module too,
# tfrunner/modules/emulated; this one is written separately on purpose).

terraform {
  required_providers {
    emulated = {
      source  = "rezuscloud/emulated"
      version = "0.1.0"
    }
  }
}

provider "emulated" {
  endpoint = var.api
}

locals {
  lb     = var.role == "controlplane" && var.endpoint == ""
  names  = sort(keys(var.machines))
  first  = length(local.names) > 0 ? local.names[0] : ""
  labels = try(var.provider_config.labels, {})
}

resource "emulated_address" "lb" {
  count = local.lb ? 1 : 0
  name  = "${var.tenant}-${var.node_group}-lb"
}

resource "emulated_machine" "node" {
  for_each  = var.machines
  name      = "${var.prefix}${each.value.hostname}"
  cluster   = var.tenant
  user_data = each.value.config
  address   = local.lb && each.key == local.first ? emulated_address.lb[0].address : null

  lifecycle {
    ignore_changes = [user_data]
  }
}
