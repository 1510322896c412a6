package emulator

import (
	"errors"
	"time"
)

// Addressing says how nodes get their own addresses.
type Addressing string

const (
	// AddressingAuto uses AddressingLoopback where a second loopback IP can be
	// bound (Linux routes all of 127.0.0.0/8 to lo) and AddressingPorts otherwise.
	AddressingAuto Addressing = ""
	// AddressingLoopback gives node i the IP 127.0.N.M and Config.Port, so each
	// node looks like its own machine with the standard apid port.
	AddressingLoopback Addressing = "loopback"
	// AddressingPorts puts every node on Config.Host with its own port.
	AddressingPorts Addressing = "ports"
)

// Config configures an Emulator. The zero value is usable: every field's
// default is documented beside it. The delays are the boot stages' durations;
// tests set them to a few milliseconds.
type Config struct {
	// StateDir persists nodes (one JSON file and one applied config per node)
	// so a restarted emulator brings them back. Default "": nothing persisted.
	StateDir string
	// Addressing picks loopback IPs or ports; default AddressingAuto.
	Addressing Addressing
	// Port is the apid port in loopback mode; default 50000.
	Port int
	// Host is the IP every node listens on in ports mode; default 127.0.0.1.
	Host string
	// TalosVersion is what a new node reports from Version; default "v1.13.0".
	TalosVersion string
	// InstallDelay is how long a node is unreachable after a config is applied
	// in maintenance mode (install to disk and reboot); default 2 s.
	InstallDelay time.Duration
	// RebootDelay is how long a node is unreachable while it reboots (Reboot,
	// Reset, and the reboot of an Upgrade); default 2 s.
	RebootDelay time.Duration
	// UpgradeDelay is added to RebootDelay for an upgrade (pulling the
	// installer, writing the new image); default 3 s.
	UpgradeDelay time.Duration
	// ServiceStartDelay is how long services report "Starting" after the API
	// comes up, before they are healthy; default 1 s.
	ServiceStartDelay time.Duration
	// ShutdownDelay is how long a node keeps serving after it accepted a
	// Reboot, Reset or Upgrade, before it goes down. Real Talos stops its
	// services first, for seconds, and a client following the action (talosctl
	// --wait) relies on that: it sends the action and opens its event stream
	// at the same time, and waits for the action's last events on that
	// stream. Default 0: down at once (the tests that do not follow actions);
	// an emulator people drive with talosctl uses InteractiveShutdownDelay.
	ShutdownDelay time.Duration
	// AfterFunc schedules the boot stages (f runs on its own goroutine after
	// d); tests can inject a manual clock. Default: time.AfterFunc.
	AfterFunc func(d time.Duration, f func())
	// Now stamps journal and log lines; default time.Now.
	Now func() time.Time
	// Logf receives the emulator's diagnostics; default: discarded.
	Logf func(format string, args ...any)
	// APIToken is the bearer token Handler's /v1 routes require. Default
	// "": the one kept in StateDir/APITokenFile, else a new random one,
	// kept there when StateDir is set (APIToken returns it).
	APIToken string
	// Kube, when set, runs a real Kubernetes control plane on the control
	// planes and an emulated kubelet on every node (kube.go); nil: light
	// mode, with etcd imitated and no Kubernetes API.
	Kube *KubeConfig
}

func (c Config) withDefaults() Config {
	if c.Port == 0 {
		c.Port = 50000
	}
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	if c.TalosVersion == "" {
		c.TalosVersion = "v1.13.0"
	}
	if c.InstallDelay == 0 {
		c.InstallDelay = 2 * time.Second
	}
	if c.RebootDelay == 0 {
		c.RebootDelay = 2 * time.Second
	}
	if c.UpgradeDelay == 0 {
		c.UpgradeDelay = 3 * time.Second
	}
	if c.ServiceStartDelay == 0 {
		c.ServiceStartDelay = time.Second
	}
	if c.AfterFunc == nil {
		c.AfterFunc = func(d time.Duration, f func()) { time.AfterFunc(d, f) }
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c
}

// Validate reports a configuration that cannot work.
// InteractiveShutdownDelay is the ShutdownDelay of an emulator that people
// and their tools drive (`rezuscloud serve --with-emulator`, `rezusctl boot
// --platform emulated`, the talosctl conformance test): long enough for
// talosctl --wait to have its event stream open before the action's last
// events on a loaded machine, short against a real node's seconds.
const InteractiveShutdownDelay = 1500 * time.Millisecond

func (c Config) Validate() error {
	switch c.Addressing {
	case AddressingAuto, AddressingLoopback, AddressingPorts:
	default:
		return errors.New("addressing must be \"\", \"loopback\" or \"ports\"")
	}
	if c.Port < 0 || c.Port > 65535 {
		return errors.New("port must be between 0 and 65535")
	}
	if c.InstallDelay < 0 || c.RebootDelay < 0 || c.UpgradeDelay < 0 || c.ServiceStartDelay < 0 || c.ShutdownDelay < 0 {
		return errors.New("delays must not be negative")
	}
	return nil
}
