package proctree

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A shell marks a sleep as its own and exits: the sleep is an orphan (its
// owner is gone) and a descendant of this test's tree, and Kill ends it.
func TestOrphansAndDescendants(t *testing.T) {
	t.Setenv(RootEnv, strconv.Itoa(os.Getpid()))
	cmd := exec.Command("sh", "-c", `REZUSCLOUD_OWNER_PID=$$ sleep 60 >/dev/null 2>&1 & echo $!`)
	cmd.Env = append(os.Environ(), RootEnv+"="+strconv.Itoa(os.Getpid()))
	out, err := cmd.Output()
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	require.NoError(t, err)
	t.Cleanup(func() { Kill([]Proc{{PID: pid}}) })

	has := func(ps []Proc) bool {
		for _, p := range ps {
			if p.PID == pid {
				return true
			}
		}
		return false
	}
	require.Eventually(t, func() bool { return has(Orphans()) }, 10*time.Second, 20*time.Millisecond, "the sleep is an orphan once its shell exits")
	require.True(t, has(Descendants(os.Getpid())), "and belongs to this tree")
	require.False(t, has(Descendants(1)), "not to another's")

	Kill([]Proc{{PID: pid}})
	require.Eventually(t, func() bool { return !alive(pid) || zombie(pid) }, 10*time.Second, 20*time.Millisecond)
}

// zombie reports whether pid has exited but is not reaped yet.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b)[i+1:])
	return len(f) > 0 && f[0] == "Z"
}

func TestMarks(t *testing.T) {
	t.Setenv(RootEnv, "")
	require.Equal(t, []string{OwnerEnv + "=" + strconv.Itoa(os.Getpid())}, Marks())
	t.Setenv(RootEnv, "42")
	require.Equal(t, []string{OwnerEnv + "=" + strconv.Itoa(os.Getpid()), RootEnv + "=42"}, Marks())
}
