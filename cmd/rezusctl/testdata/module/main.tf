# A small module provider for the CLI's tests: one emulated machine per
# machine RezusCloud asks for.
terraform {
  required_providers {
    emulated = {
      source  = "rezuscloud/emulated"
      version = "0.1.0"
    }
  }
}

provider "emulated" {
  endpoint = var.emulator
}

resource "emulated_machine" "machine" {
  for_each  = var.machines
  name      = each.value.hostname
  cluster   = var.tenant
  user_data = each.value.config
}
