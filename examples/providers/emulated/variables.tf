# Inputs RezusCloud sets. A module declares only those it uses; tofu is given
# a value for each declared one (the whole list: tenant, node_group, role,
# talos_version, install_image, machines, endpoint, provider_config).

variable "tenant" {
  type        = string
  description = "The tenant's name: the emulated cluster the machines join."
}

variable "node_group" {
  type        = string
  description = "The node group being built."
}

variable "role" {
  type        = string
  description = "controlplane or worker."
}

variable "endpoint" {
  type        = string
  default     = ""
  description = "The tenant's declared control-plane endpoint (https://host:6443); empty when it declares none."
}

variable "machines" {
  type = map(object({
    config   = string
    hostname = string
  }))
  description = "The machines to build, by name: each one's day-0 machine config (it holds the cluster's secrets) and hostname."
}

# The module's own variables, set from the Provider's spec.config: one
# without a default must be there, one with a default may be.

variable "emulator" {
  type        = string
  description = "The Talos emulator's HTTP API, e.g. http://127.0.0.1:8089."
}

variable "shape" {
  type        = string
  default     = "lab-small"
  description = "What the machines are reported as (Machine.spec.shape)."
}
