package kubecp

import "net"

// apiServerArgs are Talos's kube-apiserver flags (control_plane_static_pod.go)
// without what the emulator has no use for (audit log, encryption at rest,
// admission control config), bound to the node's IP.
func apiServerArgs(cfg Config, p nodePKI) []string {
	return []string{
		"--advertise-address=" + cfg.Address,
		// The default (lease) reconciler would write the node's IP into the
		// kubernetes Service's Endpoints, which refuse loopback addresses,
		// and log that every ten seconds. Emulated pods never dial it.
		"--endpoint-reconciler-type=none",
		"--bind-address=" + cfg.Address,
		"--secure-port=6443",
		"--allow-privileged=true",
		// Talos accepts no anonymous requests: /readyz and /version need a client certificate too.
		"--anonymous-auth=false",
		"--api-audiences=" + cfg.Endpoint,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--enable-bootstrap-token-auth=true",
		// cluster.ca and cluster.acceptedCAs, as Talos writes its ca.crt.
		"--client-ca-file=" + p.path("kube-client-ca.crt"),
		"--tls-cert-file=" + p.path("apiserver.crt"),
		"--tls-private-key-file=" + p.path("apiserver.key"),
		"--etcd-servers=" + cfg.member().ClientURL,
		"--etcd-cafile=" + p.path("etcd-ca.crt"),
		"--etcd-certfile=" + p.path("apiserver-etcd-client.crt"),
		"--etcd-keyfile=" + p.path("apiserver-etcd-client.key"),
		"--kubelet-client-certificate=" + p.path("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + p.path("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--proxy-client-cert-file=" + p.path("front-proxy-client.crt"),
		"--proxy-client-key-file=" + p.path("front-proxy-client.key"),
		"--requestheader-client-ca-file=" + p.path("aggregator-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-username-headers=X-Remote-User",
		"--service-account-issuer=" + cfg.Endpoint,
		"--service-account-key-file=" + p.path("service-account.pub"),
		"--service-account-signing-key-file=" + p.path("service-account.key"),
		"--service-cluster-ip-range=" + cfg.ServiceCIDR,
		"--profiling=false",
		// On SIGTERM, end the watches it serves and give their clients this
		// long to go: by default it keeps serving them while net/http's
		// Shutdown waits up to --request-timeout (60 s) for those streams,
		// longer than the emulator's stop grace, so every stop (each
		// Reissue) of an API server that controllers or kubelets watched
		// waited the whole grace and ended in SIGKILL.
		"--shutdown-watch-termination-grace-period=2s",
	}
}

// controllerManagerArgs are Talos's kube-controller-manager flags, bound to
// the node's IP (secure port 10257).
func controllerManagerArgs(cfg Config, p nodePKI) []string {
	kubeconfig := p.path("controller-manager.kubeconfig")
	return []string{
		"--use-service-account-credentials",
		"--allocate-node-cidrs=true",
		"--bind-address=" + cfg.Address,
		"--cluster-name=" + cfg.ClusterName,
		"--cluster-cidr=" + cfg.PodCIDR,
		"--service-cluster-ip-range=" + cfg.ServiceCIDR,
		"--cluster-signing-cert-file=" + p.path("kube-ca.crt"),
		"--cluster-signing-key-file=" + p.path("kube-ca.key"),
		"--controllers=*,bootstrapsigner,tokencleaner",
		"--configure-cloud-routes=false",
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--leader-elect=true",
		"--root-ca-file=" + p.path("kube-ca.crt"),
		"--service-account-private-key-file=" + p.path("service-account.key"),
		"--profiling=false",
		"--tls-min-version=VersionTLS13",
	}
}

// schedulerArgs are Talos's kube-scheduler flags, bound to the node's IP
// (secure port 10259); the kubeconfig and leader election are in its
// config file.
func schedulerArgs(cfg Config, p nodePKI) []string {
	kubeconfig := p.path("scheduler.kubeconfig")
	return []string{
		"--config=" + p.path("scheduler.yaml"),
		"--authentication-kubeconfig=" + kubeconfig,
		"--authentication-tolerate-lookup-failure=false",
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=" + cfg.Address,
		"--profiling=false",
		"--tls-min-version=VersionTLS13",
	}
}

// apiServerURL is the node's own kube-apiserver.
func apiServerURL(address string) string {
	return "https://" + net.JoinHostPort(address, "6443")
}
