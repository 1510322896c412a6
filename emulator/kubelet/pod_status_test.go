package kubelet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func condition(s corev1.PodStatus, typ corev1.PodConditionType) corev1.PodCondition {
	for _, c := range s.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return corev1.PodCondition{}
}

func TestPodStatus(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	always := corev1.ContainerRestartPolicyAlways
	pod := func(mutate func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "uid-1", Generation: 1},
			Spec: corev1.PodSpec{
				InitContainers: []corev1.Container{{Name: "init", Image: "busybox:1"}, {Name: "proxy", Image: "envoy:1", RestartPolicy: &always}},
				Containers:     []corev1.Container{{Name: "app", Image: "nginx:1"}},
			},
			Status: corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort},
		}
		if mutate != nil {
			mutate(p)
		}
		return p
	}

	t.Run("a new pod runs, its init container done and its sidecar running", func(t *testing.T) {
		s := podStatus(pod(nil), "10.5.0.2", "10.244.0.2", t0)
		assert.Equal(t, corev1.PodRunning, s.Phase)
		assert.Equal(t, corev1.PodQOSBestEffort, s.QOSClass, "the API's field stays")
		assert.Equal(t, "10.244.0.2", s.PodIP)
		assert.Equal(t, []corev1.PodIP{{IP: "10.244.0.2"}}, s.PodIPs)
		assert.Equal(t, "10.5.0.2", s.HostIP)
		assert.Equal(t, &t0, s.StartTime)
		for _, typ := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady, corev1.PodScheduled} {
			assert.Equal(t, corev1.ConditionTrue, condition(s, typ).Status, typ)
		}
		assert.Equal(t, "Completed", s.InitContainerStatuses[0].State.Terminated.Reason)
		assert.NotNil(t, s.InitContainerStatuses[1].State.Running, "a sidecar runs")
		app := s.ContainerStatuses[0]
		assert.True(t, app.Ready)
		assert.Equal(t, "nginx:1", app.Image)
		assert.Equal(t, "nginx@sha256:", app.ImageID[:len("nginx@sha256:")])
		assert.Equal(t, t0, app.State.Running.StartedAt)
	})

	t.Run("a pod already reported gets its own status back", func(t *testing.T) {
		p := pod(nil)
		p.Status = podStatus(p, "10.5.0.2", "10.244.0.2", t0)
		assert.True(t, equality.Semantic.DeepEqual(p.Status, podStatus(p, "10.5.0.2", "10.244.0.2", t1)))
	})

	t.Run("a readiness gate not yet true holds Ready back", func(t *testing.T) {
		p := pod(func(p *corev1.Pod) { p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "lb/ready"}} })
		s := podStatus(p, "10.5.0.2", "10.244.0.2", t0)
		assert.Equal(t, corev1.ConditionFalse, condition(s, corev1.PodReady).Status)
		assert.Equal(t, corev1.ConditionTrue, condition(s, corev1.ContainersReady).Status)

		p.Status = s
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: "lb/ready", Status: corev1.ConditionTrue})
		s = podStatus(p, "10.5.0.2", "10.244.0.2", t1)
		assert.Equal(t, corev1.ConditionTrue, condition(s, corev1.PodReady).Status)
		assert.Equal(t, t1, condition(s, corev1.PodReady).LastTransitionTime)
		assert.Equal(t, t0, condition(s, corev1.ContainersReady).LastTransitionTime)
	})

	t.Run("a new image restarts the container", func(t *testing.T) {
		p := pod(nil)
		p.Status = podStatus(p, "10.5.0.2", "10.244.0.2", t0)
		p.Spec.Containers[0].Image = "nginx:2"
		s := podStatus(p, "10.5.0.2", "10.244.0.2", t1)
		app := s.ContainerStatuses[0]
		assert.Equal(t, "nginx:2", app.Image)
		assert.EqualValues(t, 1, app.RestartCount)
		assert.Equal(t, t1, app.State.Running.StartedAt)
		assert.NotEqual(t, p.Status.ContainerStatuses[0].ContainerID, app.ContainerID)
	})

	t.Run("a stopped pod succeeded and is not ready", func(t *testing.T) {
		p := pod(nil)
		p.Status = podStatus(p, "10.5.0.2", "10.244.0.2", t0)
		s := stoppedStatus(p, t1)
		assert.Equal(t, corev1.PodSucceeded, s.Phase)
		assert.Equal(t, corev1.ConditionFalse, condition(s, corev1.PodReady).Status)
		assert.Equal(t, t1, s.ContainerStatuses[0].State.Terminated.FinishedAt)
		assert.Equal(t, t1, s.InitContainerStatuses[1].State.Terminated.FinishedAt, "the sidecar stopped too")
		assert.Equal(t, t0, s.InitContainerStatuses[0].State.Terminated.FinishedAt, "the init container had finished")
	})
}
