package domain

import (
	"encoding/json"
	"fmt"
)

// Install defaults, used when a node group's providerConfig names none.
const (
	DefaultInstallDisk = "/dev/sda"
	// VanillaSchematic is the Image Factory schematic without extensions.
	VanillaSchematic = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
)

// DefaultInstallImage is the public Image Factory's installer of a Talos
// version without a schematic.
func DefaultInstallImage(talosVersion string) string {
	return FactoryInstaller(DefaultImageFactory, nil, talosVersion)
}

// TalosInstall are the providerConfig keys of a node group that every
// provider type accepts and the machine-config renderer reads.
type TalosInstall struct {
	// InstallDisk is the disk Talos installs to; default the renderer's.
	InstallDisk string `json:"installDisk,omitempty"`
	// InstallImage is the Talos installer image; default the Image Factory's.
	InstallImage string `json:"installImage,omitempty"`
}

// InstallSettings is what the machine-config renderer reads of a node
// group's providerConfig: the install keys, and a metal group's listed
// machines, each with its own install disk (the group's is their default).
// The other keys are the provider type's own.
type InstallSettings struct {
	TalosInstall
	Machines []MachineInstall `json:"machines,omitempty"`
}

// MachineInstall is one listed machine of a metal group as the renderer
// reads it.
type MachineInstall struct {
	Address     string `json:"address"`
	InstallDisk string `json:"installDisk,omitempty"`
}

// ReadInstallSettings reads the install settings of a providerConfig
// (absent or null: none). Unknown keys are the provider type's and are let
// be; a config that is not an object of the right shape is an error, not
// a silent default (it was validated when it was written, so this means a
// stored config the validation did not see).
func ReadInstallSettings(providerConfig json.RawMessage) (InstallSettings, error) {
	var s InstallSettings
	if len(providerConfig) == 0 || string(providerConfig) == "null" {
		return s, nil
	}
	if err := json.Unmarshal(providerConfig, &s); err != nil {
		return InstallSettings{}, fmt.Errorf("reading the install settings of spec.providerConfig: %w", err)
	}
	return s, nil
}

// DiskFor is the install disk of the machine at address: its own when the
// group lists one for it, else the group's.
func (s InstallSettings) DiskFor(address string) string {
	if address != "" {
		for _, m := range s.Machines {
			if m.Address == address && m.InstallDisk != "" {
				return m.InstallDisk
			}
		}
	}
	return s.InstallDisk
}
