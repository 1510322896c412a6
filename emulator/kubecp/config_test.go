package kubecp

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigValidate(t *testing.T) {
	valid := func() Config {
		return Config{
			Name: "cp-1", Address: "127.0.9.1", DataDir: "/data", Endpoint: "https://cp.example.test:6443",
			Bootstrap: true,
			Binaries:  Binaries{Etcd: "etcd", APIServer: "a", ControllerManager: "c", Scheduler: "s"},
			PKI: PKI{KubeCA: CertAndKey{Key: []byte("k")}, EtcdCA: CertAndKey{Key: []byte("k")},
				AggregatorCA: CertAndKey{Key: []byte("k")}, ServiceAccountKey: []byte("k")},
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"valid", func(*Config) {}, ""},
		{"restart", func(c *Config) { c.Bootstrap = false }, ""},
		{"no name", func(c *Config) { c.Name = "" }, "name is empty"},
		{"address not an IP", func(c *Config) { c.Address = "cp-1.local" }, `address "cp-1.local" is no IP`},
		{"plain http endpoint", func(c *Config) { c.Endpoint = "http://cp:6443" }, "is no https URL"},
		{"bootstrap and join", func(c *Config) { c.Join = []Member{{Name: "cp-0"}} }, "bootstrap and join are exclusive"},
		{"no binaries", func(c *Config) { c.Binaries = Binaries{} }, "FindBinaries"},
		{"no PKI", func(c *Config) { c.PKI = PKI{} }, "PKIFromConfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.change(&c)
			err := c.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}

	c := Config{}
	c.setDefaults()
	assert.Equal(t, "10.96.0.0/12", c.ServiceCIDR)
	assert.Equal(t, "10.244.0.0/16", c.PodCIDR)
	assert.Equal(t, "cluster.local", c.DNSDomain)
}
