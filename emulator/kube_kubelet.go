package emulator

// The real kubelet of an emulated node (Config.Kube): started against its
// cluster's apiservers with the node's labels and taints, and stopped.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rezuscloud/rezuscloud/emulator/kubelet"
)

// stopKubelet stops the node's kubelet; shutdown: the machine goes down,
// and the kubelet posts NotReady first.
func (k *kubeSupervisor) stopKubelet(r *kubeRunner, run *nodeRun, shutdown bool) {
	k.mu.Lock()
	r.kubelet, r.klVersion, r.klKey = false, "", ""
	k.mu.Unlock()
	k.refresh(r.name)
	if shutdown {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		run.kl.Shutdown(sctx)
		cancel()
	}
	run.klStop()
	<-run.klDone
	run.kl, run.klKey, run.klStop, run.klDone = nil, "", nil, nil
}

func (k *kubeSupervisor) startKubelet(ctx context.Context, r *kubeRunner, run *nodeRun, v kubeView, w kubeWant) error {
	pki, ok := k.clusterPKI(v.st.ClusterID, v.cfg)
	if !ok {
		return errors.New("no control plane of the cluster has shown its Kubernetes CA yet")
	}
	if len(k.apiServers(v.st.ClusterID)) == 0 {
		return errors.New("waiting for a kube-apiserver of the cluster")
	}
	rc, err := k.restConfig(v, pki, "system:node:"+r.name, []string{"system:nodes"})
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	ip := v.st.Address
	if host, _, err := net.SplitHostPort(ip); err == nil {
		ip = host
	}
	var static []kubelet.StaticPod
	if v.st.Role == "controlplane" && v.bootstrapped && !v.st.EtcdLeft {
		c := v.cfg.Cluster()
		static = []kubelet.StaticPod{
			{Name: "kube-apiserver", Image: c.APIServer().Image()},
			{Name: "kube-controller-manager", Image: c.ControllerManager().Image()},
			{Name: "kube-scheduler", Image: c.Scheduler().Image()},
		}
	}
	// The kubelet's --provider-id, as machine.kubelet.extraArgs gives it.
	var providerID string
	if ids := v.cfg.Machine().Kubelet().ExtraArgs()["provider-id"]; len(ids) > 0 {
		providerID = ids[0]
	}
	kl, err := kubelet.New(kubelet.Config{
		NodeName: r.name, Address: ip, Client: cs, Version: w.kubeletVersion, StaticPods: static, ProviderID: providerID,
		OSImage: "Talos (" + v.st.Version + ")",
		Logf: func(format string, args ...any) {
			k.e.cfg.Logf("node %s: kubelet: %s", r.name, fmt.Sprintf(format, args...))
		},
	})
	if err != nil {
		return err
	}
	kctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := kl.Run(kctx); err != nil && kctx.Err() == nil {
			k.e.cfg.Logf("node %s: kubelet stopped: %v", r.name, err)
		}
	}()
	run.kl, run.klKey, run.klStop, run.klDone = kl, w.kubeletKey, cancel, done
	k.mu.Lock()
	if r.cluster == "" {
		r.cluster = v.st.ClusterID
	}
	r.kubelet, r.klVersion, r.klKey = true, w.kubeletVersion, w.kubeletKey
	k.mu.Unlock()
	k.refresh(r.name)
	return nil
}

// applyNodeMetadata is what Talos's machined does with admin credentials
// once the Node exists: the control-plane role label, the config's
// machine.nodeLabels and machine.nodeTaints.
func (k *kubeSupervisor) applyNodeMetadata(ctx context.Context, v kubeView) error {
	pki, ok := k.clusterPKI(v.st.ClusterID, v.cfg)
	if !ok {
		return errors.New("no Kubernetes CA yet")
	}
	rc, err := k.restConfig(v, pki, "talos:machined", []string{"system:masters"})
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	var taints []corev1.Taint
	for key, val := range v.cfg.Machine().NodeTaints() {
		value, effect := splitTaint(val)
		taints = append(taints, corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffect(effect)})
	}
	slices.SortFunc(taints, func(a, b corev1.Taint) int { return compareStrings(a.Key, b.Key) })
	mctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return kubelet.ApplyNodeMetadata(mctx, cs, v.st.Name, v.cfg.Machine().NodeLabels(), taints,
		v.st.Role == "controlplane", v.cfg.Cluster().ScheduleOnControlPlanes())
}

// splitTaint splits a Talos nodeTaints value "value:Effect" (or ":Effect", or
// "Effect") into its value and effect.
func splitTaint(s string) (value, effect string) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == ':' {
			return s[:i], s[i+1:]
		}
	}
	return "", s
}
