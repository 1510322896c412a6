package kubeclient

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// EditorsLabel on a namespace, set to EditorsDeny by the cluster's admins,
// keeps RezusCloud's editors out of it: for a namespace whose service
// accounts hold power that EditableNamespace cannot see (a RoleBinding in
// another namespace, a Talos API access role).
const (
	EditorsLabel = "rezuscloud.io/editors"
	EditorsDeny  = "deny"
)

// serviceAccountGroupPrefix starts the group of a namespace's service
// accounts (k8s.io/apiserver's serviceaccount.ServiceAccountGroupPrefix,
// which this module does not otherwise need).
const serviceAccountGroupPrefix = "system:serviceaccounts:"

// podSecurityEnforce is Pod Security admission's label on a namespace.
const podSecurityEnforce = "pod-security.kubernetes.io/enforce"

// EditableNamespace says whether RezusCloud's editors may change ns's
// objects, and if not why. Kubernetes's edit role in a namespace lets them
// run pods as, impersonate and mint tokens for any of its service
// accounts, and read its Secrets: that is the namespace's power, so a
// namespace is left out when that power reaches past it:
//   - kube-* (Kubernetes reserves the prefix): kube-system holds the
//     controllers' service accounts (clusterrole-aggregation-controller may
//     escalate ClusterRoles), the bootstrap tokens, and is exempt from Pod
//     Security in Talos;
//   - a namespace some of whose service accounts a ClusterRoleBinding names
//     (held, from ServiceAccountNamespaces): an operator's;
//   - one whose Pod Security enforce level is privileged: its pods may
//     mount the node's disk;
//   - one its admins labelled EditorsLabel=EditorsDeny.
func EditableNamespace(ns *corev1.Namespace, held map[string]bool) (bool, string) {
	switch {
	case strings.HasPrefix(ns.Name, "kube-"):
		return false, "a Kubernetes system namespace"
	case held[ns.Name]:
		return false, "a ClusterRoleBinding names its service accounts"
	case ns.Labels[podSecurityEnforce] == "privileged":
		return false, "Pod Security enforces privileged"
	case ns.Labels[EditorsLabel] == EditorsDeny:
		return false, EditorsLabel + "=" + EditorsDeny
	}
	return true, ""
}

// ServiceAccountNamespaces are the namespaces whose service accounts the
// ClusterRoleBindings crbs name, one by one or as the namespace's group
// (system:serviceaccounts:<ns>). The group of every service account
// (system:serviceaccounts) is not counted: Kubernetes binds it to service
// account issuer discovery, and a cluster that gives it more gives it to
// every namespace's pods anyway.
func ServiceAccountNamespaces(crbs []rbacv1.ClusterRoleBinding) map[string]bool {
	out := map[string]bool{}
	for _, b := range crbs {
		for _, s := range b.Subjects {
			switch {
			case s.Kind == rbacv1.ServiceAccountKind:
				out[s.Namespace] = true
			case s.Kind == rbacv1.GroupKind && strings.HasPrefix(s.Name, serviceAccountGroupPrefix):
				out[strings.TrimPrefix(s.Name, serviceAccountGroupPrefix)] = true
			}
		}
	}
	return out
}
