package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Image Factory schematics: since Talos 1.5 system extensions (and extra
// kernel arguments, initial META) reach a machine only through the image it
// boots or installs from. The Image Factory builds such images from a
// schematic and names them by its content-addressed ID; a tenant declares a
// schematic for all its node groups, and a node group may declare its own
// instead (the whole schematic, not a merge).

// Bounds of a schematic.
const (
	MaxSchematicExtensions  = 64
	MaxSchematicKernelArgs  = 64
	MaxSchematicKernelArg   = 256
	MaxSchematicMetaEntries = 16
	MaxSchematicMetaValue   = 4 << 10
)

// DefaultImageFactory is the public Image Factory (serve --image-factory).
const DefaultImageFactory = "https://factory.talos.dev"

// Schematic is what an image is customised with.
type Schematic struct {
	// Extensions are official system extensions, e.g. siderolabs/iscsi-tools;
	// the factory picks the build that matches the Talos version. Kept
	// sorted: their order does not matter to Talos, so it does not change
	// the ID.
	Extensions []string `json:"extensions,omitempty"`
	// ExtraKernelArgs are added to the kernel command line, in order (a
	// later argument may override an earlier one).
	ExtraKernelArgs []string `json:"extraKernelArgs,omitempty"`
	// Meta are initial META values of the image (key 0..255), by key.
	Meta []MetaValue `json:"meta,omitempty"`
	// SecureBoot installs the secure-boot variant of the installer (a UKI
	// signed by the factory). It is not part of the ID: the factory builds
	// both variants of every schematic.
	SecureBoot bool `json:"secureBoot,omitempty"`
}

// MetaValue is one initial META entry.
type MetaValue struct {
	Key   uint8  `json:"key"`
	Value string `json:"value"`
}

// extensionName is an official extension's name as the factory lists them
// (siderolabs/iscsi-tools, siderolabs/nvidia-open-gpu-kernel-modules-lts).
var extensionName = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]*[a-z0-9])?/[a-z0-9]([a-z0-9._-]*[a-z0-9])?$`)

// Default sorts the extensions and META entries, so that two schematics that
// say the same have one ID.
func (s *Schematic) Default() {
	slices.Sort(s.Extensions)
	slices.SortStableFunc(s.Meta, func(a, b MetaValue) int { return int(a.Key) - int(b.Key) })
	if len(s.Extensions) == 0 {
		s.Extensions = nil
	}
	if len(s.ExtraKernelArgs) == 0 {
		s.ExtraKernelArgs = nil
	}
	if len(s.Meta) == 0 {
		s.Meta = nil
	}
}

// Validate reports every bad field of a schematic at f.
func (s *Schematic) Validate(f *field.Path) []Cause {
	var causes []Cause
	if len(s.Extensions) > MaxSchematicExtensions {
		causes = append(causes, Cause{Field: f.Child("extensions").String(), Type: CauseTooLong, Message: fmt.Sprintf("at most %d extensions", MaxSchematicExtensions)})
	}
	seen := map[string]bool{}
	for i, e := range s.Extensions {
		p := f.Child("extensions").Index(i)
		switch {
		case !extensionName.MatchString(e):
			causes = append(causes, Cause{Field: p.String(), Type: CauseInvalid,
				Message: fmt.Sprintf("%q is not an extension name: <owner>/<name> in lower case, e.g. siderolabs/iscsi-tools", clip(e, 80))})
		case seen[e]:
			causes = append(causes, Cause{Field: p.String(), Type: CauseDuplicate, Message: fmt.Sprintf("extension %q is listed twice", e)})
		}
		seen[e] = true
	}
	if len(s.ExtraKernelArgs) > MaxSchematicKernelArgs {
		causes = append(causes, Cause{Field: f.Child("extraKernelArgs").String(), Type: CauseTooLong, Message: fmt.Sprintf("at most %d kernel arguments", MaxSchematicKernelArgs)})
	}
	for i, a := range s.ExtraKernelArgs {
		p := f.Child("extraKernelArgs").Index(i)
		switch {
		case strings.TrimSpace(a) == "":
			causes = append(causes, Cause{Field: p.String(), Type: CauseRequired, Message: "a kernel argument must not be empty"})
		case strings.ContainsAny(a, " \t\r\n\x00"):
			causes = append(causes, Cause{Field: p.String(), Type: CauseInvalid, Message: fmt.Sprintf("%q holds white space: give each argument on its own", clip(a, 80))})
		case len(a) > MaxSchematicKernelArg:
			causes = append(causes, Cause{Field: p.String(), Type: CauseTooLong, Message: fmt.Sprintf("must be no more than %d bytes", MaxSchematicKernelArg)})
		}
	}
	if len(s.Meta) > MaxSchematicMetaEntries {
		causes = append(causes, Cause{Field: f.Child("meta").String(), Type: CauseTooLong, Message: fmt.Sprintf("at most %d META entries", MaxSchematicMetaEntries)})
	}
	keys := map[uint8]bool{}
	for i, m := range s.Meta {
		p := f.Child("meta").Index(i)
		if keys[m.Key] {
			causes = append(causes, Cause{Field: p.Child("key").String(), Type: CauseDuplicate, Message: fmt.Sprintf("META key %d is given twice", m.Key)})
		}
		keys[m.Key] = true
		if len(m.Value) > MaxSchematicMetaValue {
			causes = append(causes, Cause{Field: p.Child("value").String(), Type: CauseTooLong, Message: fmt.Sprintf("must be no more than %d bytes", MaxSchematicMetaValue)})
		}
	}
	return causes
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// factorySchematic is the Image Factory's schematic (its pkg/schematic), the
// fields RezusCloud declares, with the factory's YAML keys and order: the ID
// is the SHA-256 of exactly this encoding, so the struct must not change.
type factorySchematic struct {
	Customization factoryCustomization `yaml:"customization"`
}

type factoryCustomization struct {
	ExtraKernelArgs  []string                `yaml:"extraKernelArgs,omitempty"`
	Meta             []factoryMeta           `yaml:"meta,omitempty"`
	SystemExtensions factorySystemExtensions `yaml:"systemExtensions,omitempty"`
}

type factoryMeta struct {
	Key   uint8  `yaml:"key"`
	Value string `yaml:"value"`
}

type factorySystemExtensions struct {
	OfficialExtensions []string `yaml:"officialExtensions,omitempty"`
}

func (s *Schematic) factory() factorySchematic {
	var f factorySchematic
	f.Customization.ExtraKernelArgs = s.ExtraKernelArgs
	f.Customization.SystemExtensions.OfficialExtensions = s.Extensions
	for _, m := range s.Meta {
		f.Customization.Meta = append(f.Customization.Meta, factoryMeta(m))
	}
	return f
}

// FactoryYAML is the schematic as the Image Factory takes it (POST
// /schematics) and hashes it.
func (s *Schematic) FactoryYAML() []byte {
	b, err := yaml.Marshal(s.factory())
	if err != nil {
		// Strings, a byte and slices of them always encode.
		panic(fmt.Sprintf("encoding a schematic: %v", err))
	}
	return b
}

// ID is the schematic's ID as the Image Factory computes it: the hex SHA-256
// of its canonical YAML. The vanilla schematic's is known without hashing
// (most groups declare none, and the upgrade trigger asks for every group
// an event reaches).
func (s *Schematic) ID() string {
	if s.Vanilla() {
		return VanillaSchematic
	}
	sum := sha256.Sum256(s.FactoryYAML())
	return hex.EncodeToString(sum[:])
}

// Vanilla reports whether the schematic customises nothing (the factory's
// well-known empty schematic, VanillaSchematic).
func (s *Schematic) Vanilla() bool {
	return s == nil || len(s.Extensions) == 0 && len(s.ExtraKernelArgs) == 0 && len(s.Meta) == 0
}

// ParseFactorySchematic reads a schematic in the factory's format (YAML or
// JSON, as POST /schematics takes it). Overlays and secure-boot options are
// refused: RezusCloud declares neither.
func ParseFactorySchematic(b []byte) (Schematic, error) {
	var f factorySchematic
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && err.Error() != "EOF" {
		return Schematic{}, fmt.Errorf("reading the schematic: %w", err)
	}
	s := Schematic{Extensions: f.Customization.SystemExtensions.OfficialExtensions, ExtraKernelArgs: f.Customization.ExtraKernelArgs}
	for _, m := range f.Customization.Meta {
		s.Meta = append(s.Meta, MetaValue(m))
	}
	return s, nil
}

// validSchematicID reports whether id looks like a schematic ID.
func validSchematicID(id string) bool {
	return len(id) == 64 && strings.Trim(id, "0123456789abcdef") == ""
}

// EffectiveSchematic is the schematic a node group's machines run: the
// group's own, else the tenant's, else none (nil).
func EffectiveSchematic(tenant *TenantSpec, ng *NodeGroupSpec) *Schematic {
	if ng != nil && ng.Schematic != nil {
		return ng.Schematic
	}
	if tenant != nil {
		return tenant.Schematic
	}
	return nil
}

// FactoryHost is the registry host of an Image Factory URL
// (https://factory.talos.dev -> factory.talos.dev): the factory serves its
// installer images from the host it answers on.
func FactoryHost(factoryURL string) string {
	h := strings.TrimSuffix(factoryURL, "/")
	if i := strings.Index(h, "://"); i >= 0 {
		h = h[i+3:]
	}
	return h
}

// FactoryInstaller is the factory's installer image of a schematic at a
// Talos version: <host>/metal-installer[-secureboot]/<id>:<version>.
func FactoryInstaller(factoryURL string, s *Schematic, version string) string {
	if s == nil {
		return FactoryInstallerOf(factoryURL, VanillaSchematic, false, version)
	}
	return FactoryInstallerOf(factoryURL, s.ID(), s.SecureBoot, version)
}

// FactoryInstallerOf is FactoryInstaller by schematic ID.
func FactoryInstallerOf(factoryURL, id string, secureBoot bool, version string) string {
	variant := "metal-installer"
	if secureBoot {
		variant += "-secureboot"
	}
	return FactoryHost(factoryURL) + "/" + variant + "/" + id + ":" + version
}

// SchematicOfImage is the schematic ID an Image Factory installer image
// names (<host>/<variant>installer[-secureboot]/<id>:<tag>), or "" when the
// image is not a factory installer.
func SchematicOfImage(image string) string {
	ref, _, _ := strings.Cut(image, "@")
	parts := strings.Split(ref, "/")
	if len(parts) < 3 {
		return ""
	}
	variant := strings.TrimSuffix(parts[len(parts)-2], "-secureboot")
	if variant != "installer" && !strings.HasSuffix(variant, "-installer") {
		return ""
	}
	id, _, _ := strings.Cut(parts[len(parts)-1], ":")
	if !validSchematicID(id) {
		return ""
	}
	return id
}

// InstallImageFor is an installer image at another Talos version: its tag
// replaced by version (the tag is what follows the last ':' after the last
// '/'; a registry port is not one), any digest dropped, since a digest pins
// the old version's image.
func InstallImageFor(image, version string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	slash := strings.LastIndex(image, "/")
	if colon := strings.LastIndex(image, ":"); colon > slash {
		image = image[:colon]
	}
	return image + ":" + version
}

// Installer is what a node group's machines install from at a Talos
// version: the group's explicit providerConfig.installImage (at that
// version; it wins, and then Schematic is "" since it is not ours to know),
// else the factory's installer of the group's effective schematic.
type Installer struct {
	Image string
	// Schematic is the ID the image carries ("" for an explicit image).
	Schematic string
}

// InstallerOf decides a group's installer at version from the factory URL.
func InstallerOf(factoryURL string, tenant *TenantSpec, ng *NodeGroupSpec, version string) Installer {
	if ng != nil {
		if s, err := ReadInstallSettings(ng.ProviderConfig); err == nil && s.InstallImage != "" {
			return Installer{Image: InstallImageFor(s.InstallImage, version)}
		}
	}
	sch := EffectiveSchematic(tenant, ng)
	id := VanillaSchematic
	if sch != nil {
		id = sch.ID()
	}
	return Installer{Image: FactoryInstaller(factoryURL, sch, version), Schematic: id}
}
