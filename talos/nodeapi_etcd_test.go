package talos

import "testing"

func TestEtcdMemberServing(t *testing.T) {
	urls := []string{"https://10.0.0.2:2379"}
	for _, tc := range []struct {
		name string
		m    EtcdMember
		want bool
	}{
		{"added, not started", EtcdMember{ID: 1, Learner: true}, false},
		{"started learner", EtcdMember{ID: 1, Hostname: "cp-1", ClientURLs: urls, Learner: true}, false},
		{"promoted before it started", EtcdMember{ID: 1}, false},
		{"voting and started", EtcdMember{ID: 1, Hostname: "cp-1", ClientURLs: urls}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.m.Serving(); got != tc.want {
				t.Errorf("Serving() = %v, want %v", got, tc.want)
			}
		})
	}
}
