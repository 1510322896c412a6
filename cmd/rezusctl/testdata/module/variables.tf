variable "tenant" {
  type = string
}

variable "machines" {
  type = map(object({
    config   = string
    hostname = string
  }))
}

variable "emulator" {
  type        = string
  description = "The emulator's HTTP API, from spec.config."
}
