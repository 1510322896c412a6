package emulator

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// imageServer is the ImageService. Pull records the image in the node's
// image store (nothing is downloaded); `talosctl upgrade` pulls the installer
// before LifecycleService.Upgrade installs from it.
type imageServer struct {
	machine.UnimplementedImageServiceServer

	ms *machineServer
}

// canonicalImage names an image the way containerd does, with its registry
// and tag ("alpine" is docker.io/library/alpine:latest).
func canonicalImage(ref string) string {
	name, digest, _ := strings.Cut(ref, "@")
	first, _, hasSlash := strings.Cut(name, "/")
	if !hasSlash || !strings.ContainsAny(first, ".:") && first != "localhost" {
		if !hasSlash {
			name = "library/" + name
		}
		name = "docker.io/" + name
	}
	if slash := strings.LastIndex(name, "/"); !strings.Contains(name[slash:], ":") && digest == "" {
		name += ":latest"
	}
	if digest != "" {
		return name + "@" + digest
	}
	return name
}

// imageDigest is a stable stand-in for an image's digest.
func imageDigest(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// pulled records an image in the node's store and reports its name.
func (n *node) pulled(ref string) string {
	name := canonicalImage(ref)
	n.mu.Lock()
	if !slices.Contains(n.images, name) {
		n.images = append(n.images, name)
		n.logf("pulled image %s", name)
	}
	n.mu.Unlock()
	return name
}

// hasImage reports whether ref was pulled.
func (n *node) hasImage(ref string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Contains(n.images, canonicalImage(ref))
}

// Pull "pulls" an image: one layer's progress, then the image's name.
func (s *imageServer) Pull(req *machine.ImageServicePullRequest, srv grpc.ServerStreamingServer[machine.ImageServicePullResponse]) error {
	if req.GetImageRef() == "" {
		return status.Error(codes.InvalidArgument, "image_ref is required")
	}
	name := canonicalImage(req.GetImageRef())
	if err := srv.Send(&machine.ImageServicePullResponse{Response: &machine.ImageServicePullResponse_PullProgress{
		PullProgress: &machine.ImageServicePullProgress{LayerId: imageDigest(name)[7:19], Progress: &machine.ImageServicePullLayerProgress{
			Status: machine.ImageServicePullLayerProgress_EXTRACT_COMPLETE,
		}},
	}}); err != nil {
		return err
	}
	s.ms.n.pulled(name)
	return srv.Send(&machine.ImageServicePullResponse{Response: &machine.ImageServicePullResponse_Name{Name: name}})
}

// List lists the pulled images.
func (s *imageServer) List(_ *machine.ImageServiceListRequest, srv grpc.ServerStreamingServer[machine.ImageServiceListResponse]) error {
	n := s.ms.n
	n.mu.Lock()
	images := slices.Clone(n.images)
	n.mu.Unlock()
	for _, name := range images {
		if err := srv.Send(&machine.ImageServiceListResponse{Name: name, Digest: imageDigest(name), Size: 80 << 20,
			CreatedAt: timestamppb.New(n.em.cfg.Now())}); err != nil {
			return err
		}
	}
	return nil
}
