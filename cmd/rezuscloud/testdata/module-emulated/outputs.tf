output "machines" {
  value = {
    for name, m in emulated_machine.node : name => {
      address     = m.address
      provider_id = m.provider_id
      hostname    = m.hostname
      shape       = "emulated"
    }
  }
}

output "endpoint" {
  value = local.lb ? emulated_address.lb[0].address : null
}
