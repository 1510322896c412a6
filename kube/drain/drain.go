package drain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// ErrNoNode is a node the API server does not know: nothing can run on it,
// so there is nothing to drain (a machine that never registered, or whose
// Node was deleted).
var ErrNoNode = errors.New("the node is not registered")

// Drainer cordons, drains and uncordons Nodes through one cluster's API.
type Drainer struct {
	Client kubernetes.Interface
	// Poll is the pause between two looks at the node's pods (a List of one
	// node's pods, by the indexed spec.nodeName); default 250ms, so a drain
	// ends within a quarter second of its last pod's end.
	Poll time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Progress is told how many pods are left each time the count changes
	// (not called when nil).
	Progress func(left int)
	// KubeletAway says the node's kubelet cannot answer (its machine is
	// unreachable or its Node not Ready): pods being deleted already are
	// then not waited for, since no kubelet will confirm their end (as
	// Cluster API skips the wait on an unreachable node).
	KubeletAway bool
}

func (d *Drainer) poll() time.Duration {
	if d.Poll > 0 {
		return d.Poll
	}
	return DefaultPoll
}

// DefaultPoll is the Drainer's Poll when it has none.
const DefaultPoll = 250 * time.Millisecond

func (d *Drainer) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

// Cordon marks the node unschedulable (again, harmlessly, if it is).
func (d *Drainer) Cordon(ctx context.Context, node string) error {
	return d.setUnschedulable(ctx, node, true)
}

// Uncordon makes the node schedulable again; a node that is gone is fine.
func (d *Drainer) Uncordon(ctx context.Context, node string) error {
	err := d.setUnschedulable(ctx, node, false)
	if errors.Is(err, ErrNoNode) {
		return nil
	}
	return err
}

func (d *Drainer) setUnschedulable(ctx context.Context, node string, v bool) error {
	patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, v)
	_, err := d.Client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s: %w", node, ErrNoNode)
	case err != nil:
		what := "cordoning"
		if !v {
			what = "uncordoning"
		}
		return fmt.Errorf("%s %s: %w", what, node, err)
	}
	return nil
}

// Drain cordons the node and evicts its pods until none is left (DaemonSet,
// mirror and finished pods aside), each pod with its own grace period. A
// drain that began at started (kept by the caller across restarts) and is
// still not done when timeout expires answers a *BlockedError and leaves
// the node cordoned: the caller uncordons it once it has decided not to
// disrupt the machine. ErrNoNode: nothing to drain.
func (d *Drainer) Drain(ctx context.Context, node string, started time.Time, timeout Timeout) error {
	lastLeft := -1
	var lastPod, lastReason string
	cordoned := false
	for {
		var list *corev1.PodList
		var err error
		if !cordoned {
			// An API server away for a moment is waited for, within the timeout.
			err = d.Cordon(ctx, node)
			if errors.Is(err, ErrNoNode) {
				return err
			}
			cordoned = err == nil
		}
		if cordoned {
			list, err = d.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
				FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
			})
		}
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil {
			evict, _ := Pods(list.Items)
			if d.KubeletAway {
				evict = slices.DeleteFunc(evict, func(p corev1.Pod) bool { return !Evict(p) })
			}
			if len(evict) != lastLeft && d.Progress != nil {
				d.Progress(len(evict))
			}
			lastLeft = len(evict)
			if len(evict) == 0 {
				return nil
			}
			lastPod, lastReason = "", ""
			for _, p := range evict {
				if !Evict(p) {
					continue
				}
				out, why := Classify(d.evict(ctx, p))
				switch out {
				case Fatal:
					return fmt.Errorf("drain of %s: evicting %s/%s: %s", node, p.Namespace, p.Name, why)
				case Blocked, Retry:
					lastPod, lastReason = p.Namespace+"/"+p.Name, why
				}
			}
		} else {
			lastPod, lastReason = "", err.Error()
		}
		if timeout.Expired(started, d.now()) {
			return &BlockedError{Node: node, Left: lastLeft, Pod: lastPod, Reason: lastReason, After: d.now().Sub(started)}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d.poll()):
		}
	}
}

// evict asks the API server to evict one pod with the pod's own grace period.
func (d *Drainer) evict(ctx context.Context, p corev1.Pod) error {
	return d.Client.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		// Preconditions: evict this pod, not a namesake created since.
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}},
	})
}

// Ready reports whether the node's Ready condition is True, and the
// kubelet's message when it is not.
func Ready(n *corev1.Node) (bool, string) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return true, ""
			}
			return false, c.Message
		}
	}
	return false, "the kubelet has not posted a Ready condition"
}

// WaitReady waits until the node is Ready (it came back after a reboot) or
// ctx ends; it answers the last reason it was not, or ErrNoNode for a node
// the API server does not know (a reboot keeps the Node object).
func (d *Drainer) WaitReady(ctx context.Context, node string) error {
	var why string
	for {
		n, err := d.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return fmt.Errorf("%s: %w", node, ErrNoNode)
		case err != nil:
			why = err.Error()
		default:
			ok, msg := Ready(n)
			if ok {
				return nil
			}
			why = "NotReady: " + msg
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s not Ready: %s (%w)", node, why, ctx.Err())
		case <-time.After(d.poll()):
		}
	}
}

// Delete removes the Node object of a machine that is gone; a node that is
// already gone is fine.
func (d *Drainer) Delete(ctx context.Context, node string) error {
	err := d.Client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting node %s: %w", node, err)
	}
	return nil
}
