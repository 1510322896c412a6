package upgrade

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestDecideRotationCheck(t *testing.T) {
	for _, tc := range []struct {
		stage   string
		rotated bool
		want    rotationCheck
	}{
		// A client of the new CA must be accepted before a credential
		// handed out at swap (issued by it) reaches the node.
		{domain.RotationAccept, true, checkAcceptsNew},
		// The node must serve a certificate of the new CA before a
		// credential handed out at drop (trusting it alone) reaches it.
		{domain.RotationSwap, true, checkServesNew},
		// After drop nothing more is handed out that a late node would
		// fail; it is asked to be ready before the next one restarts.
		{domain.RotationDrop, true, checkReady},
		{domain.RotationAccept, false, checkNone},
		{domain.RotationSwap, false, checkNone},
		{"", true, checkNone},
	} {
		assert.Equal(t, tc.want, decideRotationCheck(tc.stage, tc.rotated), "%s rotated=%v", tc.stage, tc.rotated)
	}
}
