package kubelet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Annotations of a mirror pod, as the kubelet sets them: the mirror
// annotation (which NodeRestriction requires of any pod a node creates)
// holds the hash of the static pod's manifest.
const (
	annotationConfigHash   = "kubernetes.io/config.hash"
	annotationConfigSource = "kubernetes.io/config.source"
)

func isMirror(pod *corev1.Pod) bool {
	_, ok := pod.Annotations[corev1.MirrorPodAnnotationKey]
	return ok
}

// mirrorName is the name of the mirror pod of static pod name: <name>-<node>.
func (k *Kubelet) mirrorName(name string) string { return name + "-" + k.cfg.NodeName }

// wantsMirror reports whether mirror pod is the mirror of one of the node's
// static pods as they are now.
func (k *Kubelet) wantsMirror(pod *corev1.Pod) bool {
	if pod.Namespace != metav1.NamespaceSystem {
		return false
	}
	for _, sp := range k.cfg.StaticPods {
		if k.mirrorName(sp.Name) == pod.Name {
			return pod.Annotations[corev1.MirrorPodAnnotationKey] == staticPodHash(sp)
		}
	}
	return false
}

// staticPodHash stands for the hash of a static pod's manifest: a new image
// (an upgrade) is a new manifest.
func staticPodHash(sp StaticPod) string {
	sum := sha256.Sum256([]byte(sp.Name + "\x00" + sp.Image))
	return hex.EncodeToString(sum[:16])
}

// mirrorPod is the mirror pod of sp on node, with what NodeRestriction asks of
// it: bound to the node, owned by the Node (a controller reference, without
// blockOwnerDeletion), and referencing no service account, secret or config
// map. The labels are those Talos gives its control-plane static pods.
func mirrorPod(sp StaticPod, node *corev1.Node) *corev1.Pod {
	hash := staticPodHash(sp)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      sp.Name + "-" + node.Name,
			Namespace: metav1.NamespaceSystem,
			Labels:    map[string]string{"k8s-app": sp.Name, "tier": "control-plane"},
			Annotations: map[string]string{
				corev1.MirrorPodAnnotationKey: hash,
				annotationConfigHash:          hash,
				annotationConfigSource:        "http", // Talos serves its static pods to the kubelet over local HTTP
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: ptr(true),
			}},
		},
		Spec: corev1.PodSpec{
			NodeName:          node.Name,
			HostNetwork:       true,
			PriorityClassName: "system-node-critical",
			Containers:        []corev1.Container{{Name: sp.Name, Image: sp.Image}},
			Tolerations:       []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
	}
}

// runStaticPods keeps a mirror pod for each static pod, now, every StatusEvery
// and when a mirror pod went.
func (p *podWorker) runStaticPods(ctx context.Context) {
	t := time.NewTicker(p.k.cfg.StatusEvery)
	defer t.Stop()
	for {
		p.syncStaticPods(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.poke:
		}
	}
}

func (p *podWorker) pokeStaticPods() {
	select {
	case p.poke <- struct{}{}:
	default:
	}
}

// syncStaticPods creates the mirror pods that are missing. One that is out of
// date is deleted by the pod sync, and created here afterwards.
func (p *podWorker) syncStaticPods(ctx context.Context) {
	node := p.k.node.Load()
	pods := p.k.cfg.Client.CoreV1().Pods(metav1.NamespaceSystem)
	for _, sp := range p.k.cfg.StaticPods {
		if _, exists, _ := p.store.GetByKey(metav1.NamespaceSystem + "/" + p.k.mirrorName(sp.Name)); exists {
			continue
		}
		_, err := pods.Create(ctx, mirrorPod(sp, node), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) && ctx.Err() == nil {
			p.k.cfg.Logf("creating the mirror pod of %s: %v", sp.Name, err)
		}
	}
}
