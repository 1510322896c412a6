output "machines" {
  description = "The machines built, by name: what RezusCloud projects into Machine objects. The address is the public IPv4, where the management plane reaches the Talos API."
  value = {
    for name, s in hcloud_server.machine : name => {
      address     = s.ipv4_address
      provider_id = tostring(s.id)
      shape       = s.server_type
      hostname    = s.name
    }
  }
}

output "endpoint" {
  description = "The control-plane endpoint address (the load balancer's public IPv4), when this group made one; it depends on no machine."
  value       = one(hcloud_load_balancer.endpoint[*].ipv4)
}
