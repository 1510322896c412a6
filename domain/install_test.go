package domain

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReadInstallSettings(t *testing.T) {
	for _, tc := range []struct {
		name, config, address, disk, image string
		bad                                bool
	}{
		{name: "absent"},
		{name: "null", config: `null`},
		{name: "the group's", config: `{"installDisk":"/dev/vda","installImage":"ghcr.io/x:1","flavor":"m1"}`, disk: "/dev/vda", image: "ghcr.io/x:1"},
		{name: "a listed machine's own disk", config: `{"installDisk":"/dev/vda","machines":[{"address":"10.0.0.5","installDisk":"/dev/nvme0n1"}]}`,
			address: "10.0.0.5", disk: "/dev/nvme0n1"},
		{name: "a listed machine without one: the group's", config: `{"installDisk":"/dev/vda","machines":[{"address":"10.0.0.5"}]}`,
			address: "10.0.0.5", disk: "/dev/vda"},
		{name: "another machine: the group's", config: `{"installDisk":"/dev/vda","machines":[{"address":"10.0.0.5","installDisk":"/dev/sdb"}]}`,
			address: "10.0.0.6", disk: "/dev/vda"},
		{name: "not an object", config: `["/dev/vda"]`, bad: true},
		{name: "a wrong type", config: `{"installDisk":7}`, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ReadInstallSettings(json.RawMessage(tc.config))
			if tc.bad {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.disk, s.DiskFor(tc.address))
			require.Equal(t, tc.image, s.InstallImage)
		})
	}
}
