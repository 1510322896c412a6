package kubeclient

import (
	"context"
	"fmt"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rezuscloud/rezuscloud/talos"
)

// AccessBindings are the ClusterRoleBindings RezusCloud keeps in every
// cluster: the groups of per-user credentials (talos.KubeGroup*) to
// Kubernetes's own cluster-admin, edit and view ClusterRoles.
func AccessBindings() []rbacv1.ClusterRoleBinding {
	var out []rbacv1.ClusterRoleBinding
	for _, b := range []struct{ group, role string }{
		{talos.KubeGroupAdmin, "cluster-admin"},
		{talos.KubeGroupEdit, "edit"},
		{talos.KubeGroupView, "view"},
	} {
		out = append(out, rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: b.group, Labels: map[string]string{"app.kubernetes.io/managed-by": "rezuscloud"}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: b.group}},
		})
	}
	return out
}

// ensured is how long a tenant's bindings, once checked, are taken as there.
const ensured = 5 * time.Minute

// EnsureAccessRBAC makes the tenant's cluster hold AccessBindings: missing
// ones are created, changed ones put back (a binding's roleRef cannot
// change: such a one is deleted and created again). It returns once the
// cluster's authorizer grants each group its role (a binding just created
// is not yet in kube-apiserver's RBAC cache, and in a new cluster the
// aggregated edit and view roles are empty until kube-controller-manager
// fills them): a credential issued after it works on its first request.
// A tenant checked in the last five minutes is not asked again.
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
	if err := ensureBindings(ctx, cs); err != nil {
		return err
	}
	if err := awaitAuthorized(ctx, cs, accessProbeEvery); err != nil {
		return err
	}
	c.mu.Lock()
	c.rbac[tenant] = now
	c.mu.Unlock()
	return nil
}

func ensureBindings(ctx context.Context, cs kubernetes.Interface) error {
	crbs := cs.RbacV1().ClusterRoleBindings()
	for _, want := range AccessBindings() {
		got, err := crbs.Get(ctx, want.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			if _, err := crbs.Create(ctx, &want, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating ClusterRoleBinding %s: %w", want.Name, err)
			}
			continue
		case err != nil:
			return fmt.Errorf("reading ClusterRoleBinding %s: %w", want.Name, err)
		}
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
			if _, err := crbs.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("updating ClusterRoleBinding %s: %w", want.Name, err)
			}
		}
	}
	return nil
}

// accessProbeEvery is how often awaitAuthorized asks again.
const accessProbeEvery = 250 * time.Millisecond

// accessProbes are, per group, a request its role allows: what
// awaitAuthorized asks the cluster's authorizer about.
var accessProbes = []struct {
	group string
	attr  authorizationv1.ResourceAttributes
}{
	{talos.KubeGroupAdmin, authorizationv1.ResourceAttributes{Verb: "create", Group: rbacv1.GroupName, Resource: "clusterrolebindings"}},
	{talos.KubeGroupEdit, authorizationv1.ResourceAttributes{Namespace: "default", Verb: "delete", Resource: "pods"}},
	{talos.KubeGroupView, authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}},
}

// awaitAuthorized asks the cluster, by SubjectAccessReview, whether each
// access group is granted a request of its role, until all are or ctx ends.
func awaitAuthorized(ctx context.Context, cs kubernetes.Interface, every time.Duration) error {
	sars := cs.AuthorizationV1().SubjectAccessReviews()
	for _, p := range accessProbes {
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
