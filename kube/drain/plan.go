package drain

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The pure decisions of a drain.

// MirrorPodAnnotation marks the API's copy of a static pod: the kubelet
// owns it, an eviction would not stop it.
const MirrorPodAnnotation = "kubernetes.io/config.mirror"

// Skip reasons of pods a drain leaves on the node.
const (
	SkipDaemonSet = "DaemonSet"
	SkipMirror    = "mirror pod"
	SkipFinished  = "finished"
)

// Pods splits the pods bound to a node into those a drain evicts and those
// it leaves (pod key -> why): a DaemonSet's pods (its controller would
// put them back and ignores unschedulable), mirror pods (the kubelet runs
// the static pod), and pods that already finished (nothing runs). A pod
// already being deleted is still waited for, so it counts as to evict; its
// eviction is not sent again (Evict says so).
func Pods(pods []corev1.Pod) (evict []corev1.Pod, skipped map[string]string) {
	skipped = map[string]string{}
	for _, p := range pods {
		key := p.Namespace + "/" + p.Name
		switch {
		case p.Annotations[MirrorPodAnnotation] != "":
			skipped[key] = SkipMirror
		case ownedByDaemonSet(p):
			skipped[key] = SkipDaemonSet
		case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
			skipped[key] = SkipFinished
		default:
			evict = append(evict, p)
		}
	}
	return evict, skipped
}

func ownedByDaemonSet(p corev1.Pod) bool {
	c := metav1.GetControllerOf(&p)
	return c != nil && c.Kind == "DaemonSet"
}

// Evict reports whether a drain still sends an eviction for the pod: not
// for one already being deleted (its grace period runs).
func Evict(p corev1.Pod) bool { return p.DeletionTimestamp == nil }

// Outcome is what an eviction's answer means for the drain.
type Outcome int

const (
	// Evicted: the API server accepted it; the pod terminates.
	Evicted Outcome = iota
	// Gone: the pod no longer exists.
	Gone
	// Blocked: a PodDisruptionBudget allows no disruption now; try again.
	Blocked
	// Retry: a transient failure (a conflict, the server busy or away).
	Retry
	// Fatal: the eviction cannot succeed (forbidden, invalid).
	Fatal
)

func (o Outcome) String() string {
	return [...]string{"evicted", "gone", "blocked", "retry", "fatal"}[o]
}

// Classify says what an eviction's error means, with a reason fit for a
// status when the drain cannot go on: a PodDisruptionBudget's refusal (429,
// or 500 when several budgets match the pod) names the budget.
func Classify(err error) (Outcome, string) {
	if err == nil {
		return Evicted, ""
	}
	switch {
	case apierrors.IsNotFound(err):
		return Gone, ""
	case apierrors.IsTooManyRequests(err):
		return Blocked, budgetReason(err)
	case apierrors.IsForbidden(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsMethodNotSupported(err):
		return Fatal, err.Error()
	case apierrors.IsInternalError(err) && strings.Contains(err.Error(), "DisruptionBudget"):
		// "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
		return Fatal, err.Error()
	}
	return Retry, err.Error()
}

// budgetReason turns a 429 of the eviction subresource into words naming
// the budget: the API server puts "The disruption budget web needs 2 healthy
// pods and has 2 currently" in the Status's DisruptionBudget cause.
func budgetReason(err error) string {
	var st apierrors.APIStatus
	if s, ok := err.(apierrors.APIStatus); ok {
		st = s
	}
	if st != nil {
		if d := st.Status().Details; d != nil {
			for _, c := range d.Causes {
				if c.Type == "DisruptionBudget" {
					return c.Message
				}
			}
		}
	}
	return err.Error()
}

// Timeout is how long a drain may wait before it gives up: the node group's
// drainTimeout, where 0 means wait as long as it takes.
type Timeout time.Duration

// Expired reports whether a drain that began at started has waited too long
// at now.
func (t Timeout) Expired(started, now time.Time) bool {
	return t > 0 && now.Sub(started) >= time.Duration(t)
}

// BlockedError is a drain that did not finish within its timeout: the
// machine must not be disrupted.
type BlockedError struct {
	Node string
	// Left counts the pods still on the node.
	Left int
	// Pod and Reason are the last refusal (a budget's words) or the pod
	// that did not go away.
	Pod, Reason string
	After       time.Duration
}

func (e *BlockedError) Error() string {
	what := fmt.Sprintf("%d pods still on it after %s", e.Left, e.After.Round(time.Second))
	switch {
	case e.Pod != "":
		what = fmt.Sprintf("evicting %s: %s", e.Pod, e.Reason)
	case e.Reason != "":
		// The API server did not answer (the cordon or the pod list).
		what = fmt.Sprintf("%s (for %s)", e.Reason, e.After.Round(time.Second))
	}
	return fmt.Sprintf("drain of %s blocked: %s", e.Node, what)
}

// Progress describes a drain under way for a status: "Draining (4 pods
// left)".
func Progress(left int) string {
	if left == 1 {
		return "Draining (1 pod left)"
	}
	return fmt.Sprintf("Draining (%d pods left)", left)
}
