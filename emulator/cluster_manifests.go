package emulator

// The bootstrap manifests a control plane applies through its cluster's
// kube-apiserver once etcd is bootstrapped, as Talos's manifest controllers
// do (internal/app/machined/pkg/controllers/k8s/internal/k8stemplates in
// Talos v1.13.0): kube-proxy's DaemonSet and CoreDNS's Deployment, with
// their service accounts, RBAC, config and the kube-dns Service. An object
// that exists is left as it is (Talos does not update them after bootstrap;
// `talosctl upgrade-k8s` does). The real kube-controller-manager makes
// their pods and the emulated kubelets run them as any pod. Flannel, which
// Talos also applies, is left out: no check reads it and no pod network runs.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	k8sres "github.com/siderolabs/talos/pkg/machinery/resources/k8s"
)

// applyBootstrapManifests creates whichever bootstrap manifests of the
// node's config are missing from its cluster, through the node's own
// kube-apiserver (apiServer, host:port), as Talos's controller does.
func (k *kubeSupervisor) applyBootstrapManifests(ctx context.Context, v kubeView, apiServer string) error {
	if apiServer == "" {
		return errors.New("its kube-apiserver does not run")
	}
	kc, err := k.e.AdminKubeconfig(v.st.Name)
	if err != nil {
		return err
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		return err
	}
	// To its own API server, under the name of the cluster's endpoint its
	// certificate is issued for.
	dialer := &net.Dialer{Timeout: 2 * time.Second}
	rc.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, network, apiServer)
	}
	rc.Timeout = 15 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	spec := bootstrapManifestsSpec(v.cfg)
	const ns = metav1.NamespaceSystem
	var steps []error
	if spec.ProxyEnabled {
		steps = append(steps,
			create(ctx, cs.CoreV1().ServiceAccounts(ns).Create, serviceAccount("kube-proxy")),
			create(ctx, cs.RbacV1().ClusterRoleBindings().Create, clusterRoleBinding("kube-proxy", "system:node-proxier", "kube-proxy", nil)),
			create(ctx, cs.CoreV1().ConfigMaps(ns).Create, inClusterKubeconfig(spec.Server)),
			create(ctx, cs.AppsV1().DaemonSets(ns).Create, kubeProxyDaemonSet(spec)),
		)
	}
	if spec.CoreDNSEnabled {
		steps = append(steps,
			create(ctx, cs.CoreV1().ServiceAccounts(ns).Create, serviceAccount("coredns")),
			create(ctx, cs.RbacV1().ClusterRoles().Create, coreDNSClusterRole()),
			create(ctx, cs.RbacV1().ClusterRoleBindings().Create, clusterRoleBinding("system:coredns", "system:coredns", "coredns", bootstrapping())),
			create(ctx, cs.CoreV1().ConfigMaps(ns).Create, coreDNSConfigMap(spec.ClusterDomain)),
			create(ctx, cs.AppsV1().Deployments(ns).Create, coreDNSDeployment(spec)),
			createService(ctx, cs.CoreV1().Services(ns), coreDNSService(spec)),
		)
	}
	return errors.Join(steps...)
}

// create creates obj unless it exists.
func create[T any](ctx context.Context, f func(context.Context, *T, metav1.CreateOptions) (*T, error), obj *T) error {
	if _, err := f(ctx, obj, metav1.CreateOptions{FieldManager: "talos"}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %T: %w", obj, err)
	}
	return nil
}

// createService creates svc unless it exists. A Service with a fixed
// clusterIP that exists already is refused as Invalid ("provided IP is
// already allocated"), not AlreadyExists, since the IP is allocated
// before the name is checked: it is looked up first, or every pass would
// fail on it and apply the manifests again.
func createService(ctx context.Context, svcs typedcorev1.ServiceInterface, svc *corev1.Service) error {
	if _, err := svcs.Get(ctx, svc.Name, metav1.GetOptions{}); err == nil {
		return nil
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading Service %s: %w", svc.Name, err)
	}
	return create(ctx, svcs.Create, svc)
}

func bootstrapping() map[string]string {
	return map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"}
}

func kubeSystem(name string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceSystem, Labels: labels}
}

func serviceAccount(name string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: kubeSystem(name, nil)}
}

func clusterRoleBinding(name, role, account string, labels map[string]string) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: account, Namespace: metav1.NamespaceSystem}},
		RoleRef:    rbacv1.RoleRef{Kind: "ClusterRole", Name: role, APIGroup: rbacv1.GroupName},
	}
}

// inClusterKubeconfig is the kubeconfig kube-proxy mounts: the cluster's
// endpoint with the pod's service-account token.
func inClusterKubeconfig(server string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: kubeSystem("kubeconfig-in-cluster", nil), Data: map[string]string{"kubeconfig": `apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: ` + server + `
    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
users:
- name: service-account
  user:
    # Talos's kube-proxy authenticates with its service account token.
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
contexts:
- context:
    cluster: local
    user: service-account
`}}
}

func kubeProxyDaemonSet(spec k8sres.BootstrapManifestsConfigSpec) *appsv1.DaemonSet {
	labels := map[string]string{"tier": "node", "k8s-app": "kube-proxy"}
	hostPath := func(name, path string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}}
	}
	return &appsv1.DaemonSet{
		ObjectMeta: kubeSystem("kube-proxy", labels),
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
				Type:          appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: new(intstr.FromInt(1))},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "kube-proxy", Image: spec.ProxyImage,
						Command: append([]string{"/usr/local/bin/kube-proxy"}, spec.ProxyArgs...),
						Env: []corev1.EnvVar{
							{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
							{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
						},
						SecurityContext: &corev1.SecurityContext{Privileged: new(true)},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "lib-modules", MountPath: "/lib/modules", ReadOnly: true},
							{Name: "ssl-certs-host", MountPath: "/etc/ssl/certs", ReadOnly: true},
							{Name: "kubeconfig", MountPath: "/etc/kubernetes", ReadOnly: true},
						},
					}},
					HostNetwork:        true,
					PriorityClassName:  "system-cluster-critical",
					ServiceAccountName: "kube-proxy",
					Tolerations: []corev1.Toleration{
						{Effect: corev1.TaintEffectNoSchedule, Operator: corev1.TolerationOpExists},
						{Effect: corev1.TaintEffectNoExecute, Operator: corev1.TolerationOpExists},
					},
					Volumes: []corev1.Volume{
						hostPath("lib-modules", "/usr/lib/modules"),
						hostPath("ssl-certs-host", "/etc/ssl/certs"),
						{Name: "kubeconfig", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: "kubeconfig-in-cluster"},
						}}},
					},
				},
			},
		},
	}
}

func coreDNSClusterRole() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "system:coredns", Labels: bootstrapping()},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
}

func coreDNSConfigMap(domain string) *corev1.ConfigMap {
	corefile := `.:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    log . {
        class error
    }
    prometheus :9153

    kubernetes ` + domain + ` in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30`
	if domain != "" {
		corefile += ` {
       disable success ` + domain + `
       disable denial ` + domain + `
    }
`
	} else {
		corefile += "\n"
	}
	corefile += `    loop
    reload
    loadbalance
}
`
	return &corev1.ConfigMap{ObjectMeta: kubeSystem("coredns", nil), Data: map[string]string{"Corefile": corefile}}
}

func coreDNSDeployment(spec k8sres.BootstrapManifestsConfigSpec) *appsv1.Deployment {
	labels := map[string]string{"k8s-app": "kube-dns"}
	httpProbe := func(path string, port int) corev1.ProbeHandler {
		return corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt(port), Scheme: corev1.URISchemeHTTP}}
	}
	return &appsv1.Deployment{
		ObjectMeta: kubeSystem("coredns", map[string]string{"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}),
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32(2)),
			Strategy: appsv1.DeploymentStrategy{
				Type:          appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: new(intstr.FromInt(1))},
			},
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
							Weight: 100,
							PodAffinityTerm: corev1.PodAffinityTerm{
								LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
									Key: "k8s-app", Operator: metav1.LabelSelectorOpIn, Values: []string{"kube-dns"},
								}}},
								TopologyKey: "kubernetes.io/hostname",
							},
						}},
					}},
					ServiceAccountName: "coredns",
					PriorityClassName:  "system-cluster-critical",
					Tolerations: []corev1.Toleration{
						{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
						{Key: "node.cloudprovider.kubernetes.io/uninitialized", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
					},
					Containers: []corev1.Container{{
						Name: "coredns", Image: spec.CoreDNSImage, ImagePullPolicy: corev1.PullIfNotPresent,
						Resources: corev1.ResourceRequirements{
							Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("170Mi")},
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("70Mi")},
						},
						Env:          []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: "161MiB"}},
						Args:         []string{"-conf", "/etc/coredns/Corefile"},
						VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns", ReadOnly: true}},
						Ports: []corev1.ContainerPort{
							{Name: "dns", Protocol: corev1.ProtocolUDP, ContainerPort: 53},
							{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, ContainerPort: 53},
							{Name: "metrics", Protocol: corev1.ProtocolTCP, ContainerPort: 9153},
						},
						LivenessProbe: &corev1.Probe{ProbeHandler: httpProbe("/health", 8080), InitialDelaySeconds: 60,
							TimeoutSeconds: 5, SuccessThreshold: 1, FailureThreshold: 5},
						ReadinessProbe: &corev1.Probe{ProbeHandler: httpProbe("/ready", 8181)},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: new(false),
							Capabilities:             &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}, Drop: []corev1.Capability{"ALL"}},
							ReadOnlyRootFilesystem:   new(true),
						},
					}},
					DNSPolicy: corev1.DNSDefault,
					Volumes: []corev1.Volume{{Name: "config-volume", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "coredns"},
						Items:                []corev1.KeyToPath{{Key: "Corefile", Path: "Corefile"}},
					}}}},
				},
			},
		},
	}
}

func coreDNSService(spec k8sres.BootstrapManifestsConfigSpec) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: kubeSystem("kube-dns", map[string]string{
			"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS",
		}),
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"k8s-app": "kube-dns"},
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt(53)},
				{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt(9153)},
			},
		},
	}
	for _, ip := range []string{spec.DNSServiceIP, spec.DNSServiceIPv6} {
		if ip != "" {
			svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, ip)
		}
	}
	if len(svc.Spec.ClusterIPs) > 0 {
		svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
	}
	if len(svc.Spec.ClusterIPs) > 1 {
		svc.Spec.IPFamilyPolicy = new(corev1.IPFamilyPolicyRequireDualStack)
	}
	return svc
}
