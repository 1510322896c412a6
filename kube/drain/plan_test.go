package drain

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func pod(name string, mutate ...func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, m := range mutate {
		m(&p)
	}
	return p
}

func ownedBy(kind string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{Kind: kind, Name: "owner", Controller: &yes}}
	}
}

func TestPods(t *testing.T) {
	now := metav1.Now()
	pods := []corev1.Pod{
		pod("web", ownedBy("ReplicaSet")),
		pod("bare"),
		pod("agent", ownedBy("DaemonSet")),
		pod("kube-apiserver-cp", func(p *corev1.Pod) { p.Annotations = map[string]string{MirrorPodAnnotation: "abc"} }),
		pod("job-done", ownedBy("Job"), func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
		pod("crashed", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }),
		pod("leaving", ownedBy("ReplicaSet"), func(p *corev1.Pod) { p.DeletionTimestamp = &now }),
		pod("owned-not-controller", func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "x"}}
		}),
	}
	evict, skipped := Pods(pods)
	var names []string
	for _, p := range evict {
		names = append(names, p.Name)
	}
	if got, want := strings.Join(names, ","), "web,bare,leaving,owned-not-controller"; got != want {
		t.Errorf("evicted %s, want %s", got, want)
	}
	want := map[string]string{"default/agent": SkipDaemonSet, "default/kube-apiserver-cp": SkipMirror,
		"default/job-done": SkipFinished, "default/crashed": SkipFinished}
	if len(skipped) != len(want) {
		t.Errorf("skipped %v, want %v", skipped, want)
	}
	for k, v := range want {
		if skipped[k] != v {
			t.Errorf("%s skipped as %q, want %q", k, skipped[k], v)
		}
	}
	if Evict(evict[2]) {
		t.Error("a pod being deleted is evicted again")
	}
	if !Evict(evict[0]) {
		t.Error("a running pod is not evicted")
	}
}

func TestClassify(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	pdb := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	pdb.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: "DisruptionBudget", Message: "The disruption budget web needs 2 healthy pods and has 2 currently"}}
	for _, tc := range []struct {
		name   string
		err    error
		want   Outcome
		reason string
	}{
		{"accepted", nil, Evicted, ""},
		{"pod gone", apierrors.NewNotFound(gr, "web-1"), Gone, ""},
		{"budget names itself", pdb, Blocked, "The disruption budget web needs 2 healthy pods and has 2 currently"},
		{"429 without a cause", apierrors.NewTooManyRequests("slow down", 1), Blocked, "slow down"},
		{"forbidden", apierrors.NewForbidden(gr, "web-1", errors.New("no")), Fatal, "forbidden"},
		{"two budgets", apierrors.NewInternalError(errors.New("This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.")), Fatal, "more than one PodDisruptionBudget"},
		{"conflict", apierrors.NewConflict(gr, "web-1", errors.New("changed")), Retry, "changed"},
		{"server away", errors.New("dial tcp 10.0.0.1:6443: connection refused"), Retry, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := Classify(tc.err)
			if got != tc.want {
				t.Errorf("outcome %s, want %s", got, tc.want)
			}
			if !strings.Contains(why, tc.reason) {
				t.Errorf("reason %q does not contain %q", why, tc.reason)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		timeout Timeout
		after   time.Duration
		want    bool
	}{
		{"within", Timeout(10 * time.Minute), 9 * time.Minute, false},
		{"at the bound", Timeout(10 * time.Minute), 10 * time.Minute, true},
		{"past", Timeout(5 * time.Second), time.Hour, true},
		{"zero waits forever", 0, 1000 * time.Hour, false},
		{"a clock that went back", Timeout(time.Minute), -time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.timeout.Expired(start, start.Add(tc.after)); got != tc.want {
				t.Errorf("Expired = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBlockedErrorSaysWhy(t *testing.T) {
	e := &BlockedError{Node: "workers-1", Left: 1, Pod: "default/web-7d9f", Reason: "The disruption budget web needs 2 healthy pods and has 2 currently", After: 10 * time.Second}
	want := "drain of workers-1 blocked: evicting default/web-7d9f: The disruption budget web needs 2 healthy pods and has 2 currently"
	if e.Error() != want {
		t.Errorf("%q, want %q", e.Error(), want)
	}
	e = &BlockedError{Node: "w", Left: 2, After: 90 * time.Second}
	if !strings.Contains(e.Error(), "2 pods still on it after 1m30s") {
		t.Error(e.Error())
	}
	e = &BlockedError{Node: "w", Left: -1, Reason: "cordoning w: connection refused", After: time.Minute}
	if e.Error() != "drain of w blocked: cordoning w: connection refused (for 1m0s)" {
		t.Error(e.Error())
	}
	if Progress(4) != "Draining (4 pods left)" || Progress(1) != "Draining (1 pod left)" {
		t.Error(Progress(4), Progress(1))
	}
}
