terraform {
  required_providers {
    hcloud = {
      source  = "hetznercloud/hcloud"
      version = "1.52.0"
    }
  }
}

# The API token comes from the environment (HCLOUD_TOKEN), which RezusCloud
# fills from the Provider's spec.credentialsRef secret; it is never a
# variable, so it never reaches spec.config, the plan or the state.
provider "hcloud" {}
