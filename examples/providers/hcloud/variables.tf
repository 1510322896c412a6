# Inputs RezusCloud sets (the module contract: docs/providers.md).
# talos_version and install_image are not declared: the snapshot a server
# boots already holds Talos, and RezusCloud only sets the inputs a module
# declares. schematic_id picks that snapshot when the Provider maps it.

variable "tenant" {
  type        = string
  description = "The tenant's name; prefixes every resource name and labels every resource."
}

variable "node_group" {
  type        = string
  description = "The node group's name; with the tenant, names the group's network, firewall and load balancer."
}

variable "role" {
  type        = string
  description = "controlplane or worker; \"\" for a group that is gone (called with no machines so that its resources are destroyed)."
}

variable "endpoint" {
  type        = string
  default     = ""
  description = "The tenant's declared control-plane endpoint (https://host:6443); empty when it declares none, and then a control-plane group makes a load balancer for it."
}

variable "machines" {
  type = map(object({
    config   = string
    hostname = string
  }))
  description = "The machines to build, by name: each one's day-0 Talos machine config (sensitive) and hostname."
}

variable "schematic_id" {
  type        = string
  default     = ""
  description = "The Image Factory schematic of the group's machines (its system extensions and kernel arguments); \"\" when the group names its own installImage. Picks the snapshot from images_by_schematic, and labels the servers."
}

variable "provider_config" {
  type        = any
  default     = {}
  description = "The node group's spec.providerConfig. Read here: serverType, location and image, each overriding the variable of the same meaning for this group."
}

# The module's own variables, set from the Provider's spec.config.

variable "image" {
  type        = string
  description = "The id (or name) of the Hetzner Cloud snapshot or image holding Talos Linux (e.g. one made from the Image Factory's hcloud image). A group may override it with providerConfig.image (an arm64 snapshot for cax server types)."
}

variable "images_by_schematic" {
  type        = map(string)
  default     = {}
  description = "Talos snapshots by Image Factory schematic ID: a group whose schematic is listed boots from its snapshot (one made from the factory's hcloud image of that schematic), so its extensions are there from the first boot. A group's providerConfig.image still wins; an unlisted schematic boots from image."
}

variable "server_type" {
  type        = string
  default     = "cx22"
  description = "The server type of a group that sets no providerConfig.serverType."
}

variable "location" {
  type        = string
  default     = "fsn1"
  description = "The location of a group that sets no providerConfig.location."
}

variable "network_zone" {
  type        = string
  default     = ""
  description = "The network zone of the groups' subnets; empty takes the zone of the group's location."
}

variable "network_ip_range" {
  type        = string
  default     = "10.0.0.0/16"
  description = "The IP range of each group's private network (the networks are per group, so every group may use the same range)."

  validation {
    condition     = can(cidrsubnet(var.network_ip_range, 8, 1))
    error_message = "network_ip_range must be an IPv4 CIDR of /24 or wider, e.g. 10.0.0.0/16."
  }
}

variable "load_balancer_type" {
  type        = string
  default     = "lb11"
  description = "The type of the control plane's load balancer (made when the tenant declares no endpoint)."
}

variable "allowed_cidrs" {
  type        = list(string)
  default     = ["0.0.0.0/0"]
  description = "Who may reach the machines' Kubernetes API (6443) and Talos API (50000) directly: the management plane must be among them. The load balancer is not behind the firewall."

  validation {
    condition     = alltrue([for c in var.allowed_cidrs : can(cidrhost(c, 0))])
    error_message = "allowed_cidrs must be CIDRs, e.g. [\"203.0.113.0/24\", \"2001:db8::/32\"]."
  }
}
