package providers

import (
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/leaktest"
)

// TestMain fails the package's tests when a goroutine or a process outlives them.
func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }
