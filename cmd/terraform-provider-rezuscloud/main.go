// Command terraform-provider-rezuscloud serves the `rezuscloud` provider
// (tfprovider) to OpenTofu and Terraform over plugin protocol 6. `go tool
// task tools` builds it into the tools dir's provider mirror.
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/rezuscloud/rezuscloud/tfprovider"
)

func main() {
	debug := flag.Bool("debug", false, "serve for a debugger: print TF_REATTACH_PROVIDERS instead of waiting for tofu to start the provider")
	flag.Parse()
	err := providerserver.Serve(context.Background(), tfprovider.New(tfprovider.Version), providerserver.ServeOpts{
		Address:         tfprovider.SourceAddress,
		Debug:           *debug,
		ProtocolVersion: 6,
	})
	if err != nil {
		log.Fatal(err)
	}
}
