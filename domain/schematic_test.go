package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The IDs the Image Factory publishes for these schematics: its own tests
// (pkg/schematic/schematic_test.go, internal/integration/schematic_test.go
// of github.com/siderolabs/image-factory v0.9.0), which a factory answers
// POST /schematics with.
func TestSchematicIDMatchesTheFactory(t *testing.T) {
	// The vanilla ID is not taken on trust: it is the hash of the empty
	// schematic's encoding.
	empty := Schematic{}
	sum := sha256.Sum256(empty.FactoryYAML())
	require.Equal(t, VanillaSchematic, hex.EncodeToString(sum[:]))
	for _, tc := range []struct {
		name string
		s    Schematic
		want string
	}{
		{"empty", Schematic{}, VanillaSchematic},
		{"empty lists", Schematic{Extensions: []string{}, ExtraKernelArgs: []string{}, Meta: []MetaValue{}}, VanillaSchematic},
		{"kernel args", Schematic{ExtraKernelArgs: []string{"noapic", "nolapic"}}, "9cba8e32753f91a16c1837ab8abf356af021706ef284aef07380780177d9a06c"},
		{"kernel args 2", Schematic{ExtraKernelArgs: []string{"nolapic", "nomodeset"}}, "e0fb1129bbbdfb5d002e94af4cdce712a8370e850950a33a242d4c3f178c532d"},
		{"meta", Schematic{Meta: []MetaValue{{Key: 0x0a, Value: "foo"}}}, "d308a2a5ee2277bed5fbaa104fcbc8d59122abfa737df987a95b4ca763459a7f"},
		{"meta json", Schematic{Meta: []MetaValue{{Key: 0xa, Value: `{"externalIPs":["1.2.3.4"]}`}}}, "fe866116408a5a13dab7d5003eb57a00954ea81ebeec3fbbcd1a6d4462a00036"},
		// The factory keeps the order it is given; this one is its test's.
		{"extensions", Schematic{Extensions: []string{"siderolabs/amd-ucode", "siderolabs/gvisor", "siderolabs/gasket-driver"}}, "51ff3e49313773332729a5c04e57af0dbe2e6d3f65ff638e6d4c3a05065fefff"},
		{"secure boot is not part of the ID", Schematic{SecureBoot: true}, VanillaSchematic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.s.ID())
		})
	}
}

// The factory's format read back gives the same ID whatever the key order,
// the white space or JSON instead of YAML (the factory's TestUnmarshalID).
func TestParseFactorySchematicIsStable(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{`{}`, VanillaSchematic},
		{`customization: {}`, VanillaSchematic},
		{`customization: {"extraKernelArgs": []}`, VanillaSchematic},
		{`{"customization": {"extraKernelArgs": ["noapic", "nolapic"]}}`, "9cba8e32753f91a16c1837ab8abf356af021706ef284aef07380780177d9a06c"},
		{`{"customization": {"systemExtensions": {}, "extraKernelArgs": ["noapic", "nolapic"]}}`, "9cba8e32753f91a16c1837ab8abf356af021706ef284aef07380780177d9a06c"},
		{"customization:\n    systemExtensions: {}\n    extraKernelArgs:\n        -   noapic\n        -   nolapic\n", "9cba8e32753f91a16c1837ab8abf356af021706ef284aef07380780177d9a06c"},
		{`{"customization": {"meta": [{"value": "foo", "key": 10}], "extraKernelArgs": [], "systemExtensions": {}}}`, "d308a2a5ee2277bed5fbaa104fcbc8d59122abfa737df987a95b4ca763459a7f"},
	} {
		s, err := ParseFactorySchematic([]byte(tc.in))
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, s.ID(), tc.in)
	}
	_, err := ParseFactorySchematic([]byte(`{"overlay": {"name": "rpi_generic", "image": "siderolabs/sbc-raspberrypi"}}`))
	require.Error(t, err, "an overlay is not ours to declare")
	s := Schematic{Extensions: []string{"siderolabs/util-linux-tools", "siderolabs/iscsi-tools"}, Meta: []MetaValue{{Key: 12, Value: "b"}, {Key: 10, Value: "a"}}}
	back, err := ParseFactorySchematic(s.FactoryYAML())
	require.NoError(t, err)
	require.Equal(t, s.ID(), back.ID(), "the factory's format round-trips")
	reordered := Schematic{Extensions: []string{"siderolabs/iscsi-tools", "siderolabs/util-linux-tools"}, Meta: []MetaValue{{Key: 10, Value: "a"}, {Key: 12, Value: "b"}}}
	s.Default()
	require.Equal(t, reordered.ID(), s.ID(), "extensions and META are sorted, so their order does not change the ID")
}

func TestSchematicValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		s      Schematic
		fields []string
	}{
		{"fine", Schematic{Extensions: []string{"siderolabs/iscsi-tools", "siderolabs/nvidia-open-gpu-kernel-modules-lts"}, ExtraKernelArgs: []string{"console=ttyS0", "net.ifnames=0"}, Meta: []MetaValue{{Key: 10, Value: "{}"}}}, nil},
		{"bad names", Schematic{Extensions: []string{"iscsi-tools", "siderolabs/ISCSI", "siderolabs/a b", "/x"}}, []string{"spec.schematic.extensions[0]", "spec.schematic.extensions[1]", "spec.schematic.extensions[2]", "spec.schematic.extensions[3]"}},
		{"duplicate", Schematic{Extensions: []string{"siderolabs/iscsi-tools", "siderolabs/iscsi-tools"}}, []string{"spec.schematic.extensions[1]"}},
		{"empty and spaced kernel args", Schematic{ExtraKernelArgs: []string{"", "  ", "a b"}}, []string{"spec.schematic.extraKernelArgs[0]", "spec.schematic.extraKernelArgs[1]", "spec.schematic.extraKernelArgs[2]"}},
		{"duplicate META key", Schematic{Meta: []MetaValue{{Key: 10}, {Key: 10}}}, []string{"spec.schematic.meta[1].key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fields []string
			for _, c := range tc.s.Validate(field.NewPath("spec", "schematic")) {
				fields = append(fields, c.Field)
			}
			require.Equal(t, tc.fields, fields)
		})
	}
}

func TestInstallerImages(t *testing.T) {
	iscsi := &Schematic{Extensions: []string{"siderolabs/iscsi-tools"}}
	id := iscsi.ID()
	require.Equal(t, "factory.talos.dev/metal-installer/"+VanillaSchematic+":v1.13.0", FactoryInstaller(DefaultImageFactory, nil, "v1.13.0"),
		"no schematic: the image RezusCloud always installed")
	require.Equal(t, "factory.example:5000/metal-installer/"+id+":v1.13.1", FactoryInstaller("http://factory.example:5000/", iscsi, "v1.13.1"))
	sb := *iscsi
	sb.SecureBoot = true
	require.Equal(t, "factory.talos.dev/metal-installer-secureboot/"+id+":v1.13.1", FactoryInstaller(DefaultImageFactory, &sb, "v1.13.1"))

	for _, tc := range []struct{ image, want string }{
		{"factory.talos.dev/metal-installer/" + id + ":v1.13.0", id},
		{"factory.talos.dev/installer-secureboot/" + id + ":v1.13.0", id},
		{"127.0.0.1:4000/aws-installer/" + id + ":v1.13.0@sha256:abcd", id},
		{"ghcr.io/siderolabs/installer:v1.13.0", ""},
		{"factory.talos.dev/metal-installer/376567:v1.13.0", ""},
	} {
		require.Equal(t, tc.want, SchematicOfImage(tc.image), tc.image)
	}

	tenant := &TenantSpec{Schematic: iscsi}
	group := &NodeGroupSpec{}
	require.Equal(t, Installer{Image: FactoryInstaller(DefaultImageFactory, iscsi, "v1.13.0"), Schematic: id}, InstallerOf(DefaultImageFactory, tenant, group, "v1.13.0"), "the tenant's schematic")
	own := &Schematic{ExtraKernelArgs: []string{"console=ttyS0"}}
	group.Schematic = own
	require.Equal(t, own.ID(), InstallerOf(DefaultImageFactory, tenant, group, "v1.13.0").Schematic, "the group's own wins")
	group.ProviderConfig = []byte(`{"installImage":"ghcr.io/acme/installer:v1.12.0@sha256:ab"}`)
	require.Equal(t, Installer{Image: "ghcr.io/acme/installer:v1.13.0"}, InstallerOf(DefaultImageFactory, tenant, group, "v1.13.0"), "an explicit installImage wins")
}

// BenchmarkSchematicID is the cost of a schematic's ID, which the upgrade
// saga's trigger computes for every node group an event reaches.
func BenchmarkSchematicID(b *testing.B) {
	s := Schematic{Extensions: []string{"siderolabs/iscsi-tools", "siderolabs/util-linux-tools", "siderolabs/qemu-guest-agent"},
		ExtraKernelArgs: []string{"console=ttyS0", "net.ifnames=0"}}
	b.ReportAllocs()
	for b.Loop() {
		_ = s.ID()
	}
}
