package configsync_test

import (
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/leaktest"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }
