output "machines" {
  description = "The machines built, by name: what RezusCloud projects into Machine objects."
  value = {
    for name, m in emulated_machine.machine : name => {
      address     = m.address
      provider_id = m.provider_id
      hostname    = m.hostname
      shape       = "emulated"
    }
  }
}

output "endpoint" {
  description = "The control-plane endpoint address, when this group made one."
  value       = local.make_endpoint ? emulated_address.endpoint[0].address : null
}
