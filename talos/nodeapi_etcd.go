package talos

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
)

// EtcdMember is one member of a cluster's etcd as a control plane lists it.
type EtcdMember struct {
	ID       uint64
	Hostname string
	// PeerURLs are the member's peer URLs (https://<address>:2380).
	PeerURLs []string
	// ClientURLs are empty until the member has started: etcd lists a
	// member from the moment it is added, before it runs.
	ClientURLs []string
	// Learner is true while the member is a learner (not yet promoted to
	// a voting member).
	Learner bool
}

// Serving reports whether the member runs as a voting member: started
// (it published its client URLs) and not a learner. A control plane that
// joins is listed before it serves.
func (m EtcdMember) Serving() bool { return len(m.ClientURLs) > 0 && !m.Learner }

// EtcdMembers lists the cluster's etcd members through the control plane at address.
func (a NodeAPI) EtcdMembers(ctx context.Context, b *secrets.Bundle, address string) ([]EtcdMember, error) {
	var out []EtcdMember
	err := a.call(ctx, b, address, func(ctx context.Context, c *client.Client) error {
		resp, err := c.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
		if err != nil {
			return fmt.Errorf("listing etcd members through %s: %w", address, err)
		}
		for _, msg := range resp.GetMessages() {
			for _, m := range msg.GetMembers() {
				out = append(out, EtcdMember{ID: m.GetId(), Hostname: m.GetHostname(), PeerURLs: m.GetPeerUrls(),
					ClientURLs: m.GetClientUrls(), Learner: m.GetIsLearner()})
			}
		}
		return nil
	})
	return out, err
}

// EtcdHealth says whether the control plane at address serves etcd: nil when
// its member answers with no errors.
func (a NodeAPI) EtcdHealth(ctx context.Context, b *secrets.Bundle, address string) error {
	return a.call(ctx, b, address, func(ctx context.Context, c *client.Client) error {
		resp, err := c.EtcdStatus(ctx)
		if err != nil {
			return fmt.Errorf("etcd status of %s: %w", address, err)
		}
		for _, msg := range resp.GetMessages() {
			if errs := msg.GetMemberStatus().GetErrors(); len(errs) > 0 {
				return fmt.Errorf("etcd member %s reports errors: %s", address, strings.Join(errs, "; "))
			}
		}
		return nil
	})
}

// EtcdLeave makes the control plane at address leave etcd (its etcd stops).
func (a NodeAPI) EtcdLeave(ctx context.Context, b *secrets.Bundle, address string) error {
	return a.call(ctx, b, address, func(ctx context.Context, c *client.Client) error {
		if err := c.EtcdLeaveCluster(ctx, &machine.EtcdLeaveClusterRequest{}); err != nil {
			return fmt.Errorf("leaving etcd on %s: %w", address, err)
		}
		return nil
	})
}

// EtcdRemoveMember removes the member with id (an unreachable one) through
// the control plane at through, itself a member.
func (a NodeAPI) EtcdRemoveMember(ctx context.Context, b *secrets.Bundle, through string, id uint64) error {
	return a.call(ctx, b, through, func(ctx context.Context, c *client.Client) error {
		if err := c.EtcdRemoveMemberByID(ctx, &machine.EtcdRemoveMemberByIDRequest{MemberId: id}); err != nil {
			return fmt.Errorf("removing etcd member %x through %s: %w", id, through, err)
		}
		return nil
	})
}

// EtcdSnapshot streams a snapshot of the cluster's etcd from the control
// plane at address (Talos lets os:etcd:backup take one). Read it to the end:
// it is checked there (SnapshotReader), and an error of the call, such as
// FailedPrecondition where etcd does not run, shows on the first Read.
// Close ends the call. Only ctx bounds it, not the call timeout: a large
// snapshot takes as long as it takes.
func (a NodeAPI) EtcdSnapshot(ctx context.Context, b *secrets.Bundle, address string) (io.ReadCloser, error) {
	ctx, cancel := context.WithCancel(ctx)
	c, err := a.secure(ctx, b, address)
	if err != nil {
		cancel()
		return nil, err
	}
	rc, err := c.EtcdSnapshot(ctx, &machine.EtcdSnapshotRequest{})
	if err != nil {
		cancel()
		c.Close()
		return nil, fmt.Errorf("etcd snapshot from %s: %w", address, err)
	}
	return &snapshotStream{SnapshotReader: NewSnapshotReader(rc), close: func() error {
		err := rc.Close()
		cancel()
		c.Close()
		return err
	}}, nil
}

type snapshotStream struct {
	*SnapshotReader
	close func() error
}

func (s *snapshotStream) Close() error { return s.close() }

// EtcdRecover recovers a cluster whose etcd is lost from a snapshot: it
// uploads the snapshot to the control plane at address (EtcdRecover) and
// bootstraps etcd there from it (Bootstrap with recover_etcd); the other
// control planes then join. Talos answers AlreadyExists (kept in the
// returned error's status) when the cluster's etcd holds data. Only ctx
// bounds the upload; the call timeout bounds the bootstrap. Uploading again
// is harmless, so a recovery cut short is retried whole.
func (a NodeAPI) EtcdRecover(ctx context.Context, b *secrets.Bundle, address string, snapshot io.Reader) error {
	c, err := a.secure(ctx, b, address)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.EtcdRecover(ctx, snapshot); err != nil {
		return fmt.Errorf("uploading an etcd snapshot to %s: %w", address, err)
	}
	bctx, cancel := context.WithTimeout(ctx, a.timeout())
	defer cancel()
	if err := c.Bootstrap(bctx, &machine.BootstrapRequest{RecoverEtcd: true}); err != nil {
		return fmt.Errorf("bootstrapping etcd on %s from the snapshot: %w", address, err)
	}
	return nil
}

// EtcdMemberStatus is what a control plane's etcd member says of itself.
type EtcdMemberStatus struct {
	MemberID, LeaderID uint64
	// Errors are the member's alarms and errors; none when it is healthy.
	Errors []string
}

// Leader reports whether the member is the cluster's etcd leader.
func (s EtcdMemberStatus) Leader() bool { return s.MemberID != 0 && s.MemberID == s.LeaderID }

// EtcdStatus asks the control plane at address for its etcd member's status.
func (a NodeAPI) EtcdStatus(ctx context.Context, b *secrets.Bundle, address string) (EtcdMemberStatus, error) {
	var out EtcdMemberStatus
	err := a.call(ctx, b, address, func(ctx context.Context, c *client.Client) error {
		resp, err := c.EtcdStatus(ctx)
		if err != nil {
			return fmt.Errorf("etcd status of %s: %w", address, err)
		}
		for _, msg := range resp.GetMessages() {
			ms := msg.GetMemberStatus()
			out = EtcdMemberStatus{MemberID: ms.GetMemberId(), LeaderID: ms.GetLeader(), Errors: ms.GetErrors()}
		}
		return nil
	})
	return out, err
}
