# A small fleet declared with the rezuscloud provider: three tenants made by
# one module, each with a control plane and workers on the emulated
# infrastructure, and a rollout that moves them all to a newer Talos, one
# tenant first. docs/terraform.md explains it; tfprovider's
# TestExampleFleet runs it against a real server.
#
#   export REZUSCLOUD_ENDPOINT=http://127.0.0.1:8080 REZUSCLOUD_TOKEN=rzt_…
#   tofu init && tofu apply

terraform {
  required_providers {
    rezuscloud = {
      source  = "rezuscloud/rezuscloud"
      version = "~> 0.1"
    }
  }
}

provider "rezuscloud" {}

variable "tenants" {
  description = "The tenants and how many workers each has."
  type        = map(number)
  default     = { alpha = 2, beta = 1, gamma = 1 }
}

variable "infrastructure" {
  description = "The Provider that builds the machines (serve --with-emulator registers emulated)."
  type        = string
  default     = "emulated"
}

variable "rollout_to" {
  description = "The Talos version the rollout moves the fleet to."
  type        = string
  default     = "v1.13.1"
}

module "tenant" {
  source   = "./modules/tenant"
  for_each = var.tenants

  name           = each.key
  workers        = each.value
  infrastructure = var.infrastructure
}

# The rollout owns the Talos version from here on: the module's tenants
# ignore changes to it (lifecycle.ignore_changes), or the next apply would
# move them back.
resource "rezuscloud_rollout" "talos" {
  name            = "talos-${replace(var.rollout_to, ".", "-")}"
  change          = jsonencode({ talosVersion = var.rollout_to })
  tenant_selector = "fleet=example"
  waves           = jsonencode([{ tenants = 1 }, { percent = 100 }])
  soak            = "0s"

  depends_on = [module.tenant]
}

output "machines" {
  description = "Each tenant's machines and their addresses."
  value       = { for name, t in module.tenant : name => t.machines }
}
