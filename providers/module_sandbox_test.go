package providers

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestModuleProvidersNeedAMirrorAndASandbox: without a provider mirror tofu
// would download and run any provider a module names, and without its
// sandbox a module reads the server's secrets: module providers are then
// refused, unless the operator says otherwise (the server's flags).
func TestModuleProvidersNeedAMirrorAndASandbox(t *testing.T) {
	spec := emulatedModuleSpec(nil)
	_, causes := ModuleChecker{NoMirror: true}.Check(spec)
	require.Len(t, causes, 1)
	require.Equal(t, "spec.type", causes[0].Field)
	require.Contains(t, causes[0].Message, "--provider-mirror")
	_, causes = ModuleChecker{Unsandboxed: true}.Check(spec)
	require.Len(t, causes, 1)
	require.Contains(t, causes[0].Message, "without its sandbox")
	_, causes = ModuleChecker{}.Check(spec)
	require.Empty(t, causes)
}
