package kubelet

import (
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// kubeletPort is the kubelet's API port, reported in status.daemonEndpoints
// (nothing serves it).
const kubeletPort = 10250

// registerBackoffMax caps the wait between registration attempts, as
// the kubelet's 7s.
const registerBackoffMax = 10 * time.Second

// register creates the Node, or adopts the one a previous boot created, and
// posts its first status; it retries until it succeeds (true) or ctx ends
// (false).
func (k *Kubelet) register(ctx context.Context) bool {
	backoff := 200 * time.Millisecond
	for {
		err := k.registerOnce(ctx)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		k.cfg.Logf("registering node %s: %v", k.cfg.NodeName, err)
		if !sleep(ctx, backoff) {
			return false
		}
		backoff = min(2*backoff, registerBackoffMax)
	}
}

func (k *Kubelet) registerOnce(ctx context.Context) error {
	nodes := k.cfg.Client.CoreV1().Nodes()
	want := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        k.cfg.NodeName,
		Labels:      k.nodeLabels(),
		Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
	}, Spec: corev1.NodeSpec{ProviderID: k.cfg.ProviderID}}
	node, err := nodes.Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		node, err = k.adopt(ctx, want)
	}
	if err != nil {
		return err
	}
	k.node.Store(node)
	return k.postStatus(ctx, true)
}

// adopt takes over the Node a previous boot registered, setting the labels
// and annotations the kubelet owns where they differ, as the kubelet
// reconciles its default labels; everything else on the Node stays.
func (k *Kubelet) adopt(ctx context.Context, want *corev1.Node) (*corev1.Node, error) {
	nodes := k.cfg.Client.CoreV1().Nodes()
	node, err := nodes.Get(ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}

	labels, annotations := map[string]string{}, map[string]string{}
	for key, v := range want.Labels {
		if node.Labels[key] != v {
			labels[key] = v
		}
	}
	for key, v := range want.Annotations {
		if node.Annotations[key] != v {
			annotations[key] = v
		}
	}
	if len(labels) == 0 && len(annotations) == 0 {
		return node, nil
	}

	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels, "annotations": annotations}})
	if err != nil {
		return nil, err
	}
	return nodes.Patch(ctx, want.Name, types.MergePatchType, patch, metav1.PatchOptions{})
}

// nodeLabels are the labels a kubelet sets on its Node; NodeRestriction lets
// it set these and not, say, node-role.kubernetes.io/*.
func (k *Kubelet) nodeLabels() map[string]string {
	return map[string]string{
		corev1.LabelHostname:      k.cfg.NodeName,
		corev1.LabelOSStable:      "linux",
		corev1.LabelArchStable:    k.cfg.Architecture,
		"beta.kubernetes.io/os":   "linux",
		"beta.kubernetes.io/arch": k.cfg.Architecture,
	}
}

// heartbeat posts the node's status every StatusEvery (registering posted
// the first).
func (k *Kubelet) heartbeat(ctx context.Context) {
	every(ctx, k.cfg.StatusEvery, func(ctx context.Context) {
		if err := k.postStatus(ctx, true); err != nil && ctx.Err() == nil {
			k.cfg.Logf("posting node status: %v", err)
		}
	})
}

// postStatus writes the node's status through the status subresource, which
// leaves the spec (a cordon, taints) and metadata as others set them.
func (k *Kubelet) postStatus(ctx context.Context, ready bool) error {
	nodes := k.cfg.Client.CoreV1().Nodes()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := nodes.Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n := cur.DeepCopy()
		n.Status = nodeStatus(cur.Status, &k.cfg, ready, metav1.NewTime(k.cfg.Now()))
		updated, err := nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		k.node.Store(updated)
		return nil
	})
}

// nodeStatus is cur with what the kubelet reports: capacity, addresses,
// nodeInfo and its four conditions, heartbeat now. What others report (other
// conditions, volumesAttached, images) stays.
func nodeStatus(cur corev1.NodeStatus, cfg *Config, ready bool, now metav1.Time) corev1.NodeStatus {
	s := *cur.DeepCopy()
	s.Capacity = cfg.Capacity.DeepCopy()
	s.Allocatable = cfg.Capacity.DeepCopy()
	s.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: cfg.Address},
		{Type: corev1.NodeHostName, Address: cfg.NodeName},
	}
	s.DaemonEndpoints = corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: kubeletPort}}
	s.NodeInfo = corev1.NodeSystemInfo{
		MachineID:               cfg.MachineID,
		SystemUUID:              cfg.SystemUUID,
		BootID:                  cfg.BootID,
		KernelVersion:           cfg.KernelVersion,
		OSImage:                 cfg.OSImage,
		ContainerRuntimeVersion: cfg.ContainerRuntimeVersion,
		KubeletVersion:          cfg.Version,
		OperatingSystem:         "linux",
		Architecture:            cfg.Architecture,
	}
	readyCond := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		Reason: "KubeletReady", Message: "kubelet is posting ready status"}
	if !ready {
		readyCond = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse,
			Reason: "KubeletNotReady", Message: "node is shutting down"}
	}
	for _, c := range []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse,
			Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse,
			Reason: "KubeletHasNoDiskPressure", Message: "kubelet has no disk pressure"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse,
			Reason: "KubeletHasSufficientPID", Message: "kubelet has sufficient PID available"},
		readyCond,
	} {
		s.Conditions = setNodeCondition(s.Conditions, c, now)
	}
	return s
}

// setNodeCondition puts c into conds with its heartbeat now; its transition
// time moves only when its status changes.
func setNodeCondition(conds []corev1.NodeCondition, c corev1.NodeCondition, now metav1.Time) []corev1.NodeCondition {
	c.LastHeartbeatTime = now
	c.LastTransitionTime = now
	for i := range conds {
		if conds[i].Type != c.Type {
			continue
		}
		if conds[i].Status == c.Status {
			c.LastTransitionTime = conds[i].LastTransitionTime
		}
		conds[i] = c
		return conds
	}
	return append(conds, c)
}
