package kubelet

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podStatus is the status a kubelet reports for pod once it runs with podIP
// on the node at hostIP: every init container done (a sidecar, one with
// restartPolicy Always, running), every container running and ready, the pod
// Ready unless a readiness gate holds it back. Times already reported stay,
// so a pod that is already so reported gets back its own status and is not
// written again. What others own (the scheduler's conditions, the API's
// qosClass, an eviction's DisruptionTarget) stays.
func podStatus(pod *corev1.Pod, hostIP, podIP string, now metav1.Time) corev1.PodStatus {
	s := *pod.Status.DeepCopy()
	s.Phase = corev1.PodRunning
	s.ObservedGeneration = pod.Generation
	s.HostIP, s.HostIPs = hostIP, []corev1.HostIP{{IP: hostIP}}
	s.PodIP, s.PodIPs = podIP, []corev1.PodIP{{IP: podIP}}
	if s.StartTime == nil {
		s.StartTime = &now
	}
	start := *s.StartTime
	s.InitContainerStatuses = containerStatuses(pod, pod.Spec.InitContainers, s.InitContainerStatuses, true, start, now)
	s.ContainerStatuses = containerStatuses(pod, pod.Spec.Containers, s.ContainerStatuses, false, start, now)

	ready := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}
	if gate, ok := unreadyGate(pod, s.Conditions); ok {
		ready = corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ReadinessGatesNotReady",
			Message: fmt.Sprintf("the status of pod readiness gate %q is not \"True\"", gate)}
	}
	for _, c := range []corev1.PodCondition{
		{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue},
		ready,
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
	} {
		c.ObservedGeneration = pod.Generation
		s.Conditions = setPodCondition(s.Conditions, c, now)
	}
	return s
}

// unreadyGate returns the first readiness gate of pod whose condition is not True.
func unreadyGate(pod *corev1.Pod, conds []corev1.PodCondition) (corev1.PodConditionType, bool) {
	for _, g := range pod.Spec.ReadinessGates {
		ok := false
		for _, c := range conds {
			if c.Type == g.ConditionType {
				ok = c.Status == corev1.ConditionTrue
			}
		}
		if !ok {
			return g.ConditionType, true
		}
	}
	return "", false
}

// setPodCondition puts c into conds; its transition time moves only when its
// status changes. The kubelet's conditions are set the same way: PodScheduled,
// set by the scheduler already, keeps its time.
func setPodCondition(conds []corev1.PodCondition, c corev1.PodCondition, now metav1.Time) []corev1.PodCondition {
	c.LastTransitionTime = now
	for i := range conds {
		if conds[i].Type != c.Type {
			continue
		}
		if conds[i].Status == c.Status {
			c.LastTransitionTime = conds[i].LastTransitionTime
			c.LastProbeTime = conds[i].LastProbeTime
		}
		conds[i] = c
		return conds
	}
	return append(conds, c)
}

// containerStatuses reports containers (of pod's spec, in order) running
// since start, or, for init containers other than sidecars, completed. A
// container whose image changed (pods' images are mutable) was restarted now.
func containerStatuses(pod *corev1.Pod, containers []corev1.Container, prev []corev1.ContainerStatus, init bool, start, now metav1.Time) []corev1.ContainerStatus {
	if len(containers) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, 0, len(containers))
	for _, c := range containers {
		var old *corev1.ContainerStatus
		for i := range prev {
			if prev[i].Name == c.Name {
				old = &prev[i]
			}
		}
		restarts, since := int32(0), start
		if old != nil {
			restarts = old.RestartCount
			if old.State.Running != nil {
				since = old.State.Running.StartedAt
			}
			if old.Image != c.Image {
				restarts, since = restarts+1, now
			}
		}
		st := corev1.ContainerStatus{
			Name:         c.Name,
			Image:        c.Image,
			ImageID:      imageID(c.Image),
			ContainerID:  containerID(pod, c.Name, restarts),
			RestartCount: restarts,
			Ready:        true,
			Started:      ptr(true),
			State:        corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: since}},
		}
		if init && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
			st.Started = ptr(false)
			st.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: start, FinishedAt: start, ContainerID: st.ContainerID,
			}}
			if old != nil && old.State.Terminated != nil && old.Image == c.Image {
				st.State.Terminated = old.State.Terminated.DeepCopy()
			}
		}
		out = append(out, st)
	}
	return out
}

// containerID is a stable containerd ID for a container of pod at its
// restart count, as CRI reports one.
func containerID(pod *corev1.Pod, name string, restarts int32) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%s/%d", pod.UID, name, restarts))
	return "containerd://" + hex.EncodeToString(sum[:])
}

// imageID is a digest reference for image, the form containerd reports.
func imageID(image string) string {
	if strings.Contains(image, "@") {
		return image // already by digest
	}
	repo := image
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	sum := sha256.Sum256([]byte(image))
	return repo + "@sha256:" + hex.EncodeToString(sum[:])
}

func ptr[T any](v T) *T { return &v }

// stoppedStatus is pod's status once a deletion stopped its containers: each
// exited 0 (they handle SIGTERM), so the pod Succeeded and is no longer ready.
func stoppedStatus(pod *corev1.Pod, now metav1.Time) corev1.PodStatus {
	s := *pod.Status.DeepCopy()
	s.Phase = corev1.PodSucceeded
	for _, list := range [][]corev1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses} {
		for i := range list {
			c := &list[i]
			if c.State.Running == nil {
				continue // a completed init container
			}
			c.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: c.State.Running.StartedAt, FinishedAt: now, ContainerID: c.ContainerID,
			}}
			c.Ready, c.Started = false, ptr(false)
		}
	}
	for _, c := range []corev1.PodCondition{
		{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionFalse},
		{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted"},
		{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "PodCompleted"},
	} {
		c.ObservedGeneration = pod.Generation
		s.Conditions = setPodCondition(s.Conditions, c, now)
	}
	return s
}
