// Command terraform-provider-emulated serves the `emulated` terraform provider
// (tfprovider/emulated) to OpenTofu over plugin protocol 6. `go tool task
// tools` builds it into the tools dir's provider mirror.
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/rezuscloud/rezuscloud/tfprovider/emulated"
)

func main() {
	debug := flag.Bool("debug", false, "serve for a debugger: print TF_REATTACH_PROVIDERS instead of waiting for tofu to start the provider")
	flag.Parse()
	if !*debug {
		dieWithParent()
	}
	err := providerserver.Serve(context.Background(), emulated.New(emulated.Version), providerserver.ServeOpts{
		Address:         emulated.SourceAddress,
		Debug:           *debug,
		ProtocolVersion: 6,
	})
	if err != nil {
		log.Fatal(err)
	}
}
