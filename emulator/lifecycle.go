package emulator

import (
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// lifecycleServer is the LifecycleService that newer clients upgrade with:
// Upgrade installs the image's version to "disk" (staged) and streams
// progress; the next reboot boots into it.
type lifecycleServer struct {
	machine.UnimplementedLifecycleServiceServer

	ms *machineServer
}

func progress(msg string) *machine.LifecycleServiceUpgradeResponse {
	return &machine.LifecycleServiceUpgradeResponse{Progress: &machine.LifecycleServiceInstallProgress{
		Response: &machine.LifecycleServiceInstallProgress_Message{Message: msg},
	}}
}

func exitCode(code int32) *machine.LifecycleServiceUpgradeResponse {
	return &machine.LifecycleServiceUpgradeResponse{Progress: &machine.LifecycleServiceInstallProgress{
		Response: &machine.LifecycleServiceInstallProgress_ExitCode{ExitCode: code},
	}}
}

// Upgrade stages the version of req's image; the fail-next-upgrade fault
// ends it with exit code 1 (the service reports failure in-band, not as an error).
func (l *lifecycleServer) Upgrade(req *machine.LifecycleServiceUpgradeRequest, srv grpc.ServerStreamingServer[machine.LifecycleServiceUpgradeResponse]) error {
	image := req.GetSource().GetImageName()
	version, ok := versionFromImage(image)
	if !ok {
		return status.Errorf(codes.InvalidArgument, "image %q has no tag to upgrade to", image)
	}
	n := l.ms.n
	if err := n.em.checkInstaller(image); err != nil {
		return err
	}
	// talosctl pulls the installer first (ImageService.Pull); a client that
	// did not gets it pulled here, as containerd would.
	if !n.hasImage(image) {
		if err := srv.Send(progress("pulling " + image)); err != nil {
			return err
		}
		n.pulled(image)
	}
	if err := srv.Send(progress("installing " + canonicalImage(image))); err != nil {
		return err
	}
	n.mu.Lock()
	failed := n.st.Faults.FailNextUpgrade
	if failed {
		n.st.Faults.FailNextUpgrade = false
		n.logf("upgrade to %s failed: emulated fault", version)
	} else {
		n.st.Staged, n.st.StagedImage = version, image
		n.logf("installed %s; it boots on the next reboot", version)
	}
	n.mu.Unlock()
	n.em.persist(n)
	if failed {
		if err := srv.Send(progress("upgrade failed: emulated fault")); err != nil {
			return err
		}
		return srv.Send(exitCode(1))
	}
	if err := srv.Send(progress("installed " + version + "; reboot to boot into it")); err != nil {
		return err
	}
	return srv.Send(exitCode(0))
}
