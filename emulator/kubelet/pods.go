package kubelet

import (
	"context"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// podWorkers is how many pods are synced at once; retryMax caps the backoff
// of a pod whose sync keeps failing.
const (
	podWorkers = 2
	retryMax   = 10 * time.Second
)

// podWorker keeps the pods bound to the node as a kubelet would, from an
// informer on them: a pod runs, a deleted pod stops and goes away, a mirror
// pod exists for each static pod.
type podWorker struct {
	k     *Kubelet
	store cache.Store
	queue workqueue.TypedRateLimitingInterface[string]
	poke  chan struct{} // asks for a static pod sync now
}

// runPods runs the pod worker until ctx ends.
func (k *Kubelet) runPods(ctx context.Context) {
	// The Node authorizer lets a kubelet list and watch only the pods bound
	// to it, which is what this field selector asks for.
	factory := informers.NewSharedInformerFactoryWithOptions(k.cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", k.cfg.NodeName).String()
		}))
	defer factory.Shutdown()

	informer := factory.Core().V1().Pods().Informer()
	p := &podWorker{
		k:     k,
		store: informer.GetStore(),
		// A pod whose sync failed (the apiserver restarting, say) is
		// retried within seconds, never the minutes a controller's
		// default backoff reaches.
		queue: workqueue.NewTypedRateLimitingQueue(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, retryMax)),
		poke: make(chan struct{}, 1),
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    p.enqueue,
		UpdateFunc: func(_, obj any) { p.enqueue(obj) },
		DeleteFunc: p.forget,
	}); err != nil {
		k.cfg.Logf("watching pods: %v", err)
		return
	}
	factory.Start(ctx.Done())

	var wg sync.WaitGroup
	for range podWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p.processNext(ctx) {
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
			p.runStaticPods(ctx)
		}
	}()
	<-ctx.Done()
	p.queue.ShutDown()
	wg.Wait()
}

func (p *podWorker) enqueue(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if addr, err := netip.ParseAddr(pod.Status.PodIP); err == nil && !pod.Spec.HostNetwork {
		// Reserved here, in the informer's order, rather than by a worker:
		// after a restart every address in use is known before a new pod
		// asks for one.
		p.k.ips.reserve(pod.UID, addr)
	}
	if key, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
		p.queue.Add(key)
	}
}

// forget frees the address of a pod that is gone and, for a mirror pod, asks
// for it to be created again at once.
func (p *podWorker) forget(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	p.k.ips.release(pod.UID)
	if isMirror(pod) {
		p.pokeStaticPods()
	}
}

func (p *podWorker) processNext(ctx context.Context) bool {
	key, quit := p.queue.Get()
	if quit {
		return false
	}
	defer p.queue.Done(key)
	if err := p.sync(ctx, key); err != nil {
		if ctx.Err() == nil {
			p.k.cfg.Logf("syncing pod %s: %v", key, err)
		}
		p.queue.AddRateLimited(key)
		return true
	}
	p.queue.Forget(key)
	return true
}

func (p *podWorker) sync(ctx context.Context, key string) error {
	obj, exists, err := p.store.GetByKey(key)
	if err != nil || !exists {
		return err
	}
	pod := obj.(*corev1.Pod)
	switch {
	case pod.DeletionTimestamp != nil:
		return p.terminate(ctx, key, pod)
	case isMirror(pod) && !p.k.wantsMirror(pod):
		// Its static pod is gone or changed: the kubelet deletes the
		// mirror, and runStaticPods creates the new one.
		return p.delete(ctx, pod)
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return nil
	default:
		return p.run(ctx, pod)
	}
}

// run reports pod running and ready.
func (p *podWorker) run(ctx context.Context, pod *corev1.Pod) error {
	hostIP, podIP := p.k.cfg.Address, p.k.cfg.Address
	if !pod.Spec.HostNetwork {
		addr, err := p.podIP(ctx, pod)
		if err != nil {
			return err
		}
		podIP = addr.String()
	}
	want := podStatus(pod, hostIP, podIP, metav1.NewTime(p.k.cfg.Now()))
	if equality.Semantic.DeepEqual(pod.Status, want) {
		return nil
	}
	return p.updateStatus(ctx, pod, want)
}

// podIP is the address pod has, or a new one from the node's pod CIDR.
func (p *podWorker) podIP(ctx context.Context, pod *corev1.Pod) (netip.Addr, error) {
	if addr, err := netip.ParseAddr(pod.Status.PodIP); err == nil {
		return addr, nil // reserved by enqueue
	}
	node := p.k.node.Load()
	if node.Spec.PodCIDR == "" {
		// The controller manager gives a registered Node its pod CIDR
		// a moment later; look again before falling back.
		if fresh, err := p.k.cfg.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err == nil {
			node = fresh
		}
	}
	if cidr, err := netip.ParsePrefix(node.Spec.PodCIDR); err == nil {
		p.k.ips.setPrefix(cidr)
	}
	return p.k.ips.allocate(pod.UID)
}

// terminate stops a deleted pod's containers once its grace period, capped
// at MaxGrace, has passed since the deletion, reports them stopped and
// deletes the pod for good (grace 0, this pod's UID only), as a kubelet does
// when its containers are gone. An eviction is a deletion too: the API
// server sets the deletion timestamp.
func (p *podWorker) terminate(ctx context.Context, key string, pod *corev1.Pod) error {
	var grace time.Duration
	if pod.DeletionGracePeriodSeconds != nil {
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	// The API sets the timestamp to the deletion's time plus the grace
	// period, to the second.
	deleted := pod.DeletionTimestamp.Add(-grace)
	if wait := deleted.Add(min(grace, p.k.cfg.MaxGrace)).Sub(p.k.cfg.Now()); wait > 0 {
		p.queue.AddAfter(key, wait)
		return nil
	}

	if !isMirror(pod) && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		// A kubelet reports a deleted pod's terminal phase before the
		// pod goes, so a Job's controller can count it and drop its
		// tracking finalizer.
		if err := p.updateStatus(ctx, pod, stoppedStatus(pod, metav1.NewTime(p.k.cfg.Now()))); err != nil {
			return err
		}
	}
	return p.delete(ctx, pod)
}

// updateStatus writes status through pod's status subresource.
func (p *podWorker) updateStatus(ctx context.Context, pod *corev1.Pod, status corev1.PodStatus) error {
	up := pod.DeepCopy()
	up.Status = status
	_, err := p.k.cfg.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, up, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil // deleted meanwhile
	}
	return err
}

// delete removes pod at once, unless another pod of its name replaced it.
func (p *podWorker) delete(ctx context.Context, pod *corev1.Pod) error {
	err := p.k.cfg.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr(int64(0)),
		Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}
