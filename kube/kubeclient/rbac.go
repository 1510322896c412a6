package kubeclient

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/rezuscloud/rezuscloud/talos"
)

// AccessBindings are the ClusterRoleBindings RezusCloud keeps in every
// cluster: the groups of per-user credentials (talos.KubeGroup*) to
// Kubernetes's own cluster-admin and view ClusterRoles. Editors get view
// cluster-wide too; what they may change they get per namespace
// (EditBinding in every EditableNamespace), never cluster-wide: Kubernetes's
// edit role may impersonate service accounts and mint their tokens, and in
// kube-system those are the controllers' (issue 42).
func AccessBindings() []rbacv1.ClusterRoleBinding {
	var out []rbacv1.ClusterRoleBinding
	for _, b := range []struct{ group, role string }{
		{talos.KubeGroupAdmin, "cluster-admin"},
		{talos.KubeGroupEdit, "view"},
		{talos.KubeGroupView, "view"},
	} {
		out = append(out, rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: b.group, Labels: managedBy()},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.role},
			Subjects:   []rbacv1.Subject{groupSubject(b.group)},
		})
	}
	return out
}

// EditBinding is the RoleBinding that lets editors change a namespace's
// objects: their group to Kubernetes's edit ClusterRole, in ns only.
func EditBinding(ns string) rbacv1.RoleBinding {
	return rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: talos.KubeGroupEdit, Namespace: ns, Labels: managedBy()},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{groupSubject(talos.KubeGroupEdit)},
	}
}

func managedBy() map[string]string {
	return map[string]string{"app.kubernetes.io/managed-by": "rezuscloud"}
}

func groupSubject(g string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: g}
}

// ensured is how long a tenant's bindings, once checked, are taken as there.
const ensured = 5 * time.Minute

// EnsureAccessRBAC makes the tenant's cluster hold AccessBindings and an
// EditBinding in each EditableNamespace (and in no other): missing ones are
// created, changed ones put back (a binding's roleRef cannot change: such a
// one is deleted and created again, which is how a cluster bound by an
// earlier release moves its editors off cluster-wide edit). It returns once
// the cluster's authorizer grants each group its role (a binding just
// created is not yet in kube-apiserver's RBAC cache, and in a new cluster
// the aggregated edit and view roles are empty until
// kube-controller-manager fills them): a credential issued after it works
// on its first request. A tenant checked in the last five minutes is not
// asked again, so a namespace made since is editable after the next check.
func (c *Clients) EnsureAccessRBAC(ctx context.Context, tenant string) error {
	now := c.now()
	c.mu.Lock()
	at, ok := c.rbac[tenant]
	c.mu.Unlock()
	if ok && now.Sub(at) < ensured {
		return nil
	}
	cs, err := c.For(ctx, tenant)
	if err != nil {
		return err
	}
	probeNS, err := ensureBindings(ctx, cs)
	if err != nil {
		return err
	}
	if err := awaitAuthorized(ctx, cs, probeNS, accessProbeEvery); err != nil {
		return err
	}
	c.mu.Lock()
	c.rbac[tenant] = now
	c.mu.Unlock()
	return nil
}

// ensureBindings puts the access bindings in place and returns a namespace
// editors may edit ("" when there is none), for awaitAuthorized. The
// namespaced bindings come first: an editor of a cluster bound by an
// earlier release keeps editing its namespaces while the cluster-wide
// binding is replaced.
func ensureBindings(ctx context.Context, cs kubernetes.Interface) (string, error) {
	nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("listing namespaces: %w", err)
	}
	crbs, err := cs.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("listing ClusterRoleBindings: %w", err)
	}
	held := ServiceAccountNamespaces(crbs.Items)
	editable := map[string]bool{}
	terminating := map[string]bool{}
	for _, ns := range nss.Items {
		if ns.Status.Phase == corev1.NamespaceTerminating {
			terminating[ns.Name] = true // its bindings go with it; a create would be refused
			continue
		}
		if ok, _ := EditableNamespace(&ns, held); ok {
			editable[ns.Name] = true
		}
	}
	if err := ensureEditBindings(ctx, cs, editable, terminating); err != nil {
		return "", err
	}
	if err := ensureClusterBindings(ctx, cs, crbs.Items); err != nil {
		return "", err
	}
	switch {
	case editable[metav1.NamespaceDefault]:
		return metav1.NamespaceDefault, nil
	case len(editable) == 0:
		return "", nil
	}
	return slices.Sorted(maps.Keys(editable))[0], nil
}

// ensureEditBindings makes every namespace in editable, and no other, hold
// EditBinding; namespaces in terminating are left alone.
func ensureEditBindings(ctx context.Context, cs kubernetes.Interface, editable, terminating map[string]bool) error {
	// By name, labelled or not: one someone made by hand is judged too.
	have, err := cs.RbacV1().RoleBindings(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", talos.KubeGroupEdit).String()})
	if err != nil {
		return fmt.Errorf("listing RoleBindings %s: %w", talos.KubeGroupEdit, err)
	}
	found := map[string]bool{}
	for _, got := range have.Items {
		if got.Name != talos.KubeGroupEdit { // a server that ignored the field selector
			continue
		}
		found[got.Namespace] = true
		rbs := cs.RbacV1().RoleBindings(got.Namespace)
		switch want := EditBinding(got.Namespace); {
		case terminating[got.Namespace]:
		case !editable[got.Namespace]:
			if err := rbs.Delete(ctx, got.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting RoleBinding %s/%s: %w", got.Namespace, got.Name, err)
			}
		case got.RoleRef != want.RoleRef:
			if err := rbs.Delete(ctx, got.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("replacing RoleBinding %s/%s: %w", got.Namespace, got.Name, err)
			}
			if _, err := rbs.Create(ctx, &want, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("replacing RoleBinding %s/%s: %w", got.Namespace, got.Name, err)
			}
		case !sameSubjects(got.Subjects, want.Subjects):
			got.Subjects = want.Subjects
			if _, err := rbs.Update(ctx, &got, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("updating RoleBinding %s/%s: %w", got.Namespace, got.Name, err)
			}
		}
	}
	for _, ns := range slices.Sorted(maps.Keys(editable)) {
		if found[ns] {
			continue
		}
		want := EditBinding(ns)
		if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &want, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating RoleBinding %s/%s: %w", ns, want.Name, err)
		}
	}
	return nil
}

// ensureClusterBindings makes the cluster's ClusterRoleBindings (have)
// hold AccessBindings.
func ensureClusterBindings(ctx context.Context, cs kubernetes.Interface, have []rbacv1.ClusterRoleBinding) error {
	crbs := cs.RbacV1().ClusterRoleBindings()
	for _, want := range AccessBindings() {
		i := slices.IndexFunc(have, func(b rbacv1.ClusterRoleBinding) bool { return b.Name == want.Name })
		if i < 0 {
			if _, err := crbs.Create(ctx, &want, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating ClusterRoleBinding %s: %w", want.Name, err)
			}
			continue
		}
		got := have[i]
		if got.RoleRef != want.RoleRef {
			if err := crbs.Delete(ctx, want.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("replacing ClusterRoleBinding %s: %w", want.Name, err)
			}
			if _, err := crbs.Create(ctx, &want, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("replacing ClusterRoleBinding %s: %w", want.Name, err)
			}
			continue
		}
		if !sameSubjects(got.Subjects, want.Subjects) {
			got.Subjects = want.Subjects
			if _, err := crbs.Update(ctx, &got, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("updating ClusterRoleBinding %s: %w", want.Name, err)
			}
		}
	}
	return nil
}

// accessProbeEvery is how often awaitAuthorized asks again.
const accessProbeEvery = 250 * time.Millisecond

// accessProbes are, per group, a request its role allows: what
// awaitAuthorized asks the cluster's authorizer about. editNS is a
// namespace editors may edit ("": none, and the editors' probe is a
// viewer's).
func accessProbes(editNS string) []accessProbe {
	edit := authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}
	if editNS != "" {
		edit = authorizationv1.ResourceAttributes{Namespace: editNS, Verb: "delete", Resource: "pods"}
	}
	return []accessProbe{
		{talos.KubeGroupAdmin, authorizationv1.ResourceAttributes{Verb: "create", Group: rbacv1.GroupName, Resource: "clusterrolebindings"}},
		{talos.KubeGroupEdit, edit},
		{talos.KubeGroupView, authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}},
	}
}

type accessProbe struct {
	group string
	attr  authorizationv1.ResourceAttributes
}

// awaitAuthorized asks the cluster, by SubjectAccessReview, whether each
// access group is granted a request of its role (editors in editNS), until
// all are or ctx ends.
func awaitAuthorized(ctx context.Context, cs kubernetes.Interface, editNS string, every time.Duration) error {
	sars := cs.AuthorizationV1().SubjectAccessReviews()
	for _, p := range accessProbes(editNS) {
		for {
			attr := p.attr
			got, err := sars.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: "rezuscloud:access-probe", Groups: []string{p.group}, ResourceAttributes: &attr}}, metav1.CreateOptions{})
			if err == nil && got.Status.Allowed {
				break
			}
			select {
			case <-ctx.Done():
				if err == nil {
					err = fmt.Errorf("%s may not %s %s yet", p.group, attr.Verb, attr.Resource)
				}
				return fmt.Errorf("waiting for the access bindings to take effect: %w", err)
			case <-time.After(every):
			}
		}
	}
	return nil
}

func sameSubjects(a, b []rbacv1.Subject) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
