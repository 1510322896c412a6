variable "tenant" {
  type = string
}

variable "node_group" {
  type = string
}

variable "role" {
  type = string
}

variable "talos_version" {
  type = string
}

variable "endpoint" {
  type = string
}

variable "provider_config" {
  type    = any
  default = {}
}

variable "machines" {
  type = map(object({
    config   = string
    hostname = string
  }))
}

# Own variables, from the Provider's spec.config.

variable "api" {
  type        = string
  description = "The emulator's HTTP API."
}

variable "prefix" {
  type    = string
  default = ""
}
