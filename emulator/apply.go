package emulator

import (
	"context"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// defaultTryTimeout is how long a TRY config runs when the request names no
// timeout, Talos's default.
const defaultTryTimeout = time.Minute

// triedFrom is the config a TRY config replaced, which it reverts to.
type triedFrom struct {
	b   []byte
	cfg config.Provider
}

// ApplyConfiguration installs a config in maintenance mode (then the node
// "installs" and reboots into mTLS, whatever the mode), or changes the config
// of a configured node as the mode says: REBOOT reboots into it, NO_REBOOT
// applies it in place, AUTO does either by needsReboot, STAGED keeps it for the
// next reboot, TRY applies it in place until TryModeTimeout unless another
// apply confirms it. NO_REBOOT and TRY refuse a change that needs a reboot, as
// Talos does. The refuse-apply fault answers Unavailable before anything else.
func (m *machineServer) ApplyConfiguration(_ context.Context, req *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	n := m.n
	n.mu.Lock()
	refuse := n.st.Faults.RefuseApply
	n.mu.Unlock()
	if refuse {
		return nil, status.Error(codes.Unavailable, "emulated fault: refusing ApplyConfiguration")
	}
	cfg, err := loadConfig(req.GetData())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "invalid machine config: %v", err)
	}
	msg := &machine.ApplyConfiguration{Metadata: m.meta(), Mode: machine.ApplyConfigurationRequest_REBOOT}
	resp := &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{msg}}
	if m.maintenance {
		if req.GetDryRun() {
			msg.ModeDetails = "dry run: the config is valid"
			return resp, nil
		}
		msg.ModeDetails = "Applied configuration with a reboot"
		n.stageForReboot(req.GetData(), PhaseInstalling)
		go n.transition(PhaseInstalling, n.em.cfg.InstallDelay, func() { n.logf("installed talos %s", n.st.Version) })
		return resp, nil
	}

	n.mu.Lock()
	running := n.cfg
	n.mu.Unlock()
	if running == nil { // a Reset wiped it while this call was in flight
		return nil, status.Error(codes.Unavailable, "the node is resetting")
	}
	reboot, err := needsReboot(running, cfg)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "comparing configs: %v", err)
	}
	mode := req.GetMode()
	if mode == machine.ApplyConfigurationRequest_AUTO {
		mode = machine.ApplyConfigurationRequest_NO_REBOOT
		if reboot {
			mode = machine.ApplyConfigurationRequest_REBOOT
		}
	}
	if reboot && (mode == machine.ApplyConfigurationRequest_NO_REBOOT || mode == machine.ApplyConfigurationRequest_TRY) {
		return nil, status.Errorf(codes.FailedPrecondition, "the config change needs a reboot, which mode %s does not allow", mode)
	}
	msg.Mode = mode
	if req.GetDryRun() {
		msg.ModeDetails = fmt.Sprintf("dry run: the config is valid and would be applied with mode %s", mode)
		return resp, nil
	}
	switch mode {
	case machine.ApplyConfigurationRequest_REBOOT:
		msg.ModeDetails = "Applied configuration with a reboot"
		n.stageForReboot(req.GetData(), PhaseRebooting)
		go n.transition(PhaseRebooting, n.em.cfg.RebootDelay, nil)
		return resp, nil
	case machine.ApplyConfigurationRequest_STAGED:
		n.mu.Lock()
		n.staged, n.st.StagedConfigHash = req.GetData(), configHash(req.GetData())
		n.logf("configuration staged for the next reboot")
		n.mu.Unlock()
		msg.ModeDetails = "Staged configuration to be applied after the next reboot"
	case machine.ApplyConfigurationRequest_TRY:
		timeout := defaultTryTimeout
		if d := req.GetTryModeTimeout(); d != nil && d.AsDuration() > 0 {
			timeout = d.AsDuration()
		}
		n.tryConfig(req.GetData(), cfg, timeout)
		msg.ModeDetails = fmt.Sprintf("applied configuration in try mode; it is rolled back in %s unless applied again", timeout)
	default: // NO_REBOOT
		n.mu.Lock()
		n.adoptConfigLocked(req.GetData(), cfg)
		n.logf("configuration applied without reboot")
		n.mu.Unlock()
		msg.ModeDetails = "Applied configuration without a reboot"
	}
	n.em.persist(n)
	return resp, nil
}

// stageForReboot writes a config for the reboot that follows (an install or
// mode REBOOT) and persists it, with the phase the node goes down in, before
// the call is answered: as with an upgrade, a reboot caught by an emulator
// restart still boots into it (restoreConfigLocked).
func (n *node) stageForReboot(b []byte, down Phase) {
	n.mu.Lock()
	n.staged, n.st.StagedConfigHash = b, configHash(b)
	n.st.Phase = down
	n.mu.Unlock()
	n.em.persist(n)
}

// adoptConfigLocked makes a config the running one for good: it replaces a
// staged config and confirms or ends a TRY, as a config written to disk does.
func (n *node) adoptConfigLocked(b []byte, cfg config.Provider) {
	n.staged, n.st.StagedConfigHash, n.tryPrev = nil, "", nil
	n.setConfigLocked(b, cfg)
}

// tryConfig runs cfg until timeout, then goes back to the config before the
// first of a run of TRY applies, unless something adopted a config since.
func (n *node) tryConfig(b []byte, cfg config.Provider, timeout time.Duration) {
	n.mu.Lock()
	prev := n.tryPrev
	if prev == nil {
		prev = &triedFrom{b: n.cfgBytes, cfg: n.cfg}
	}
	n.setConfigLocked(b, cfg)
	n.tryPrev = prev
	gen := n.tryGen
	n.logf("configuration applied in try mode for %s", timeout)
	n.mu.Unlock()
	n.em.cfg.AfterFunc(timeout, func() {
		n.mu.Lock()
		if n.tryGen != gen || n.tryPrev == nil || n.stopped {
			n.mu.Unlock()
			return
		}
		n.revertTryLocked()
		n.mu.Unlock()
		n.em.persist(n)
	})
}

func (n *node) revertTryLocked() {
	prev := n.tryPrev
	n.tryPrev = nil
	n.setConfigLocked(prev.b, prev.cfg)
	n.logf("try mode ended: configuration rolled back")
}

// rebootConfigLocked is what a reboot does to the config: it boots a staged
// one, or drops a TRY config (never written to disk) for the one before it.
func (n *node) rebootConfigLocked() {
	switch {
	case n.staged != nil:
		cfg, err := loadConfig(n.staged)
		if err != nil { // it was checked when staged; only a damaged state dir gets here
			n.em.cfg.Logf("node %s: dropping the staged config: %v", n.st.Name, err)
			n.staged, n.st.StagedConfigHash = nil, ""
			return
		}
		n.adoptConfigLocked(n.staged, cfg)
		n.logf("booted the staged configuration")
	case n.tryPrev != nil:
		n.revertTryLocked()
	}
}

// wipeConfigLocked forgets the config and everything that came with it (Reset).
func (n *node) wipeConfigLocked() {
	n.cfg, n.cfgBytes, n.staged, n.tryPrev = nil, nil, nil, nil
	n.tryGen++
	n.st.Role, n.st.ClusterID, n.st.Bootstrapped, n.st.EtcdLeft = "", "", false, false
	n.st.ConfigHash, n.st.KubernetesVersion, n.st.StagedConfigHash = "", "", ""
	// The next config installs anew, from its own installer.
	n.st.Image = ""
}

// durableConfigLocked is the config a restart finds on disk: a TRY config is
// not written there, so an emulator restart reverts it like a reboot does.
func (n *node) durableConfigLocked() []byte {
	if n.tryPrev != nil {
		return n.tryPrev.b
	}
	return n.cfgBytes
}
