package domain

// TenantRef names the tenant called name.
func TenantRef(name string) Ref { return Ref{Kind: TenantKind.Kind, Name: name} }

// ObjectRef names an object of kind k; tenant is "" for cluster-scoped kinds.
func ObjectRef(k *KindInfo, tenant, name string) Ref {
	return Ref{Kind: k.Kind, Tenant: tenant, Name: name}
}
