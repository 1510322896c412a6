package kubelet

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// renewLease keeps the node's Lease in kube-node-lease fresh, renewing it
// every quarter of its duration: the node lifecycle controller takes a node
// whose Lease expired for dead.
func (k *Kubelet) renewLease(ctx context.Context) {
	renew := func(ctx context.Context) {
		if err := k.renewLeaseOnce(ctx); err != nil && ctx.Err() == nil {
			k.cfg.Logf("renewing the node lease: %v", err)
		}
	}
	renew(ctx)
	every(ctx, k.cfg.LeaseDuration/4, renew)
}

func (k *Kubelet) renewLeaseOnce(ctx context.Context) error {
	leases := k.cfg.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := leases.Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = leases.Create(ctx, k.lease(&coordinationv1.Lease{}), metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		_, err = leases.Update(ctx, k.lease(cur.DeepCopy()), metav1.UpdateOptions{})
		return err
	})
}

// lease is l renewed now, held by the node and owned by its Node, so the
// garbage collector removes it with the Node.
func (k *Kubelet) lease(l *coordinationv1.Lease) *coordinationv1.Lease {
	name := k.cfg.NodeName
	seconds := int32(k.cfg.LeaseDuration.Seconds())
	now := metav1.NewMicroTime(k.cfg.Now())
	l.Name, l.Namespace = name, corev1.NamespaceNodeLease
	l.Spec.HolderIdentity = &name
	l.Spec.LeaseDurationSeconds = &seconds
	l.Spec.RenewTime = &now
	if node := k.node.Load(); node != nil {
		l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: name, UID: node.UID}}
	}
	return l
}
