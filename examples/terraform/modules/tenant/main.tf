# One tenant: a control plane and some workers, ready before the module
# is done (wait_for), and its machines as an output.

terraform {
  required_providers {
    rezuscloud = { source = "rezuscloud/rezuscloud" }
  }
}

variable "name" { type = string }
variable "workers" { type = number }
variable "infrastructure" { type = string }

resource "rezuscloud_tenant" "this" {
  name          = var.name
  labels        = { fleet = "example" }
  talos_version = "v1.13.0"

  lifecycle {
    ignore_changes = [talos_version]
  }
}

resource "rezuscloud_node_group" "cp" {
  tenant         = rezuscloud_tenant.this.name
  name           = "cp"
  role           = "controlplane"
  machines       = 1
  infrastructure = var.infrastructure
  wait_for       = "Ready"
  wait_timeout   = "10m"
}

# Workers after the control plane, and destroyed before it: RezusCloud
# refuses to remove a cluster's last control plane while workers remain.
resource "rezuscloud_node_group" "workers" {
  depends_on = [rezuscloud_node_group.cp]

  tenant         = rezuscloud_tenant.this.name
  name           = "workers"
  role           = "worker"
  machines       = var.workers
  infrastructure = var.infrastructure
  node_labels    = { pool = "general" }
  wait_for       = "Ready"
  wait_timeout   = "10m"
}

data "rezuscloud_machines" "all" {
  tenant     = rezuscloud_tenant.this.name
  depends_on = [rezuscloud_node_group.cp, rezuscloud_node_group.workers]
}

output "machines" {
  value = { for m in data.rezuscloud_machines.all.machines : m.name => m.address }
}
