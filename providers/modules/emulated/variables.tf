# Inputs RezusCloud sets (a module declares the ones it uses).

variable "tenant" {
  type        = string
  description = "The tenant's name: the emulated cluster the machines join."
}

variable "role" {
  type        = string
  description = "controlplane or worker."
}

variable "endpoint" {
  type        = string
  default     = ""
  description = "The tenant's declared control-plane endpoint (https://host:6443); empty when the tenant declares none."
}

variable "machines" {
  type = map(object({
    config   = string
    hostname = string
  }))
  description = "The machines to build, by name: each one's day-0 machine config (sensitive) and hostname."
}

# The module's own variable, set from the Provider's spec.config.

variable "emulator" {
  type        = string
  default     = null
  description = "The emulator's HTTP API, e.g. http://127.0.0.1:8089; null: the provider reads EMULATOR_ENDPOINT, from the Provider's credentials."
}
