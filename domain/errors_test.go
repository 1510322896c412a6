package domain_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestErrorStatusCodes(t *testing.T) {
	tests := []struct {
		err  error
		code int
	}{
		{domain.NewNotFound("Tenant", "t1"), http.StatusNotFound},
		{domain.NewAlreadyExists("Tenant", "t1"), http.StatusConflict},
		{domain.NewConflict("Tenant", "t1", "stale"), http.StatusConflict},
		{domain.NewInvalid("Tenant", "t1", []domain.Cause{{Field: "spec", Message: "bad"}}), http.StatusUnprocessableEntity},
		{domain.NewBadRequest("bad"), http.StatusBadRequest},
	}
	for _, tc := range tests {
		t.Run(string(domain.ReasonOf(tc.err)), func(t *testing.T) {
			s := domain.StatusOf(tc.err)
			require.Equal(t, tc.code, s.Code)
			require.Equal(t, "Status", s.Kind)
			require.Equal(t, "Failure", s.Status)
		})
	}
}
