package handlers_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
	"github.com/rezuscloud/rezuscloud/identity"
	"github.com/rezuscloud/rezuscloud/projections"
)

type stubAuth struct{}

func (stubAuth) Authenticate(*http.Request) (identity.Identity, error) {
	return identity.Identity{}, nil
}

func TestDepsValidate(t *testing.T) {
	store, cache, ids := &eventstore.Store{}, &projections.Cache{}, &identity.Service{}
	tests := []struct {
		name string
		deps handlers.Deps
		want []string // substrings of the error, one per problem; none for valid
	}{
		{name: "identity service", deps: handlers.Deps{Store: store, Cache: cache, Identity: ids}},
		{name: "plain authenticator", deps: handlers.Deps{Store: store, Cache: cache, Auth: stubAuth{}}},
		{name: "nothing", deps: handlers.Deps{}, want: []string{"Deps.Store is required", "Deps.Cache is required", "Deps.Identity or Deps.Auth is required"}},
		{name: "no store", deps: handlers.Deps{Cache: cache, Identity: ids}, want: []string{"Deps.Store is required"}},
		{name: "no cache", deps: handlers.Deps{Store: store, Identity: ids}, want: []string{"Deps.Cache is required"}},
		{name: "no authenticator", deps: handlers.Deps{Store: store, Cache: cache}, want: []string{"Deps.Identity or Deps.Auth is required"}},
		{name: "two authenticators", deps: handlers.Deps{Store: store, Cache: cache, Identity: ids, Auth: stubAuth{}}, want: []string{"both set"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.deps.Validate()
			if len(tc.want) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
			require.Len(t, err.(interface{ Unwrap() []error }).Unwrap(), len(tc.want))
		})
	}
}
