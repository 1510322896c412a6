package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestWithoutSelf(t *testing.T) {
	all := []string{"rezuscloud-0.rezuscloud-nodes:6222", "rezuscloud-1.rezuscloud-nodes:6222", "rezuscloud-2.rezuscloud-nodes:6222"}
	tests := []struct {
		name, hostname string
		addrs          []string
		want           []string
	}{
		{name: "a StatefulSet pod drops its own DNS name", hostname: "rezuscloud-1", addrs: all,
			want: []string{"rezuscloud-0.rezuscloud-nodes:6222", "rezuscloud-2.rezuscloud-nodes:6222"}},
		{name: "the bare host name", hostname: "rz-0", addrs: []string{"rz-0:6222", "rz-1:6222"}, want: []string{"rz-1:6222"}},
		{name: "case does not matter", hostname: "RZ-0", addrs: []string{"rz-0.lan:6222", "rz-1.lan:6222"}, want: []string{"rz-1.lan:6222"}},
		{name: "a prefix of another name is not this host", hostname: "rezuscloud-1", addrs: []string{"rezuscloud-10.nodes:6222"}, want: []string{"rezuscloud-10.nodes:6222"}},
		{name: "IP addresses are left to the own-address check", hostname: "10", addrs: []string{"10.0.0.1:6222"}, want: []string{"10.0.0.1:6222"}},
		{name: "no host name drops nothing", addrs: all, want: all},
		{name: "a bad entry is left for the check to refuse", hostname: "rz-0", addrs: []string{"rz-0"}, want: []string{"rz-0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, withoutSelf(tt.addrs, tt.hostname))
		})
	}
	assert.Equal(t, []string{"a:1", "b:2"}, splitList(" a:1, ,b:2,"))
}
