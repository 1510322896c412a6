package webui

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLayoutFooterShowsVersion: every signed-in page's footer names the
// server's release (Config.Version, which the server sets to its build's);
// without one it names none rather than a made-up one.
func TestLayoutFooterShowsVersion(t *testing.T) {
	for _, tt := range []struct {
		name, version string
		want          string
	}{
		{name: "release", version: "0.2.0", want: `<span data-testid="server-version">0.2.0</span>`},
		{name: "stamped prerelease", version: "0.3.0-rc.1", want: `<span data-testid="server-version">0.3.0-rc.1</span>`},
		{name: "none", version: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := New(Config{Version: tt.version}, Deps{})
			defer u.Close()
			var b bytes.Buffer
			require.NoError(t, Layout(u, viewer{Name: "ada", Role: "admin", Path: "/ui/"}, "Dashboard").Render(context.Background(), &b))
			require.Contains(t, b.String(), "<footer")
			if tt.want == "" {
				require.NotContains(t, b.String(), "server-version")
				return
			}
			require.Contains(t, b.String(), tt.want)
		})
	}
}
