package providers

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/domain"
)

// fiftyFileModule is the emulated module plus 47 files of resources,
// variables and locals (~2 KiB each, ~100 KiB in all): the size of a real
// multi-file cloud module.
func fiftyFileModule(tb testing.TB) *domain.ProviderSpec {
	files, _ := BuiltinModule(domain.ProviderEmulated)
	for i := range 47 {
		var sb strings.Builder
		fmt.Fprintf(&sb, "variable \"opt_%d\" {\n  type    = string\n  default = \"v%d\"\n}\n\n", i, i)
		fmt.Fprintf(&sb, "locals {\n  tags_%d = { tenant = var.tenant, index = %d, name = \"x-${var.tenant}-%d\" }\n}\n\n", i, i, i)
		for j := range 6 {
			fmt.Fprintf(&sb, "resource \"emulated_address\" \"extra_%d_%d\" {\n  count = var.role == \"controlplane\" ? 0 : 0\n  name  = \"${var.tenant}-%d-%d-${var.opt_%d}\"\n  # a comment that takes some room, as real modules' do\n}\n\n", i, j, i, j, i)
		}
		files.Files[fmt.Sprintf("extra_%02d.tf", i)] = sb.String()
	}
	if len(files.Files) != 50 {
		tb.Fatalf("%d files", len(files.Files))
	}
	return &domain.ProviderSpec{Type: domain.ProviderModule, Module: files, Config: json.RawMessage(`{"emulator":"http://127.0.0.1:1"}`)}
}

// BenchmarkModuleCheck is the write-time check of a 50-file module (issue
// 16's target: under 20 ms).
func BenchmarkModuleCheck(b *testing.B) {
	spec := fiftyFileModule(b)
	total := 0
	for _, f := range spec.Module.Files {
		total += len(f)
	}
	c := ModuleChecker{Available: map[string]bool{"registry.opentofu.org/rezuscloud/emulated": true}}
	if _, causes := c.Check(spec); len(causes) > 0 {
		b.Fatalf("%v", causes)
	}
	b.SetBytes(int64(total))
	b.ReportAllocs()
	for b.Loop() {
		c.Check(spec)
	}
}
