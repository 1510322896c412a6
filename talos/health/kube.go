package health

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// KubeSource gives a tenant's Kubernetes client (a *kubeclient.Clients).
type KubeSource interface {
	For(ctx context.Context, tenant string) (kubernetes.Interface, error)
}

// maxKubeMessage bounds what the API server's answers add to a reason.
const maxKubeMessage = 512

// observeKube asks the tenant's API server whether it is ready, its
// version and every Node, within Timeout. Nothing is asked when the tenant
// runs no Kubernetes (NoKube) or the server has no client (Kube nil).
func (s *Service) observeKube(ctx context.Context, tenant string) kubeObservation {
	if s.cfg.Kube == nil || (s.cfg.NoKube != nil && s.cfg.NoKube(tenant) != "") {
		return kubeObservation{}
	}
	k := kubeObservation{Checked: true}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	cs, err := s.cfg.Kube.For(ctx, tenant)
	if err != nil {
		k.Err = clip(err.Error())
		return k
	}
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Raw()
	switch {
	case err == nil && strings.TrimSpace(string(raw)) == "ok":
		k.Ready = true
	case err == nil:
		k.NotReady = clip(string(raw))
	case len(raw) == 0:
		// No answer at all: the API server is unreachable.
		k.Err = clip(err.Error())
		return k
	default:
		// /readyz answers 500 with the checks that fail.
		k.NotReady = clip(firstFailures(string(raw), err.Error()))
	}
	if v, err := cs.Discovery().ServerVersion(); err == nil {
		k.Version = v.GitVersion
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		k.Err = clip("listing Nodes: " + err.Error())
		return k
	}
	k.Nodes = make(map[string]nodeObservation, len(nodes.Items))
	for i := range nodes.Items {
		n := &nodes.Items[i]
		o := nodeObservation{Kubelet: n.Status.NodeInfo.KubeletVersion, Message: "the kubelet has not posted a Ready condition"}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				o.Ready, o.Message = c.Status == corev1.ConditionTrue, clip(c.Message)
			}
		}
		if o.Ready {
			o.Message = ""
		}
		k.Nodes[n.Name] = o
	}
	return k
}

// firstFailures keeps the failing checks of a /readyz answer ("[-]...").
func firstFailures(body, fallback string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "[-]") {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		return fallback
	}
	return strings.Join(out, "; ")
}

func clip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) <= maxKubeMessage {
		return s
	}
	return s[:maxKubeMessage-3] + "..."
}
