package domain_test

import (
	"testing"

	"github.com/rezuscloud/rezuscloud/domain"
)

// BenchmarkSelectorMatchesPairs is the per-object cost of a labelSelector
// list: the read model keeps each object's labels as LabelPairs and matches
// the parsed selector against them (projections.Cache.List).
func BenchmarkSelectorMatchesPairs(b *testing.B) {
	sel, err := domain.ParseSelector("bench=yes,shard in (s1,s2),!retired,tier!=gold")
	if err != nil {
		b.Fatal(err)
	}
	pairs := domain.NewLabelPairs(map[string]string{"bench": "yes", "shard": "s2", "tier": "silver", "env": "prod", "team": "infra"})
	b.ReportAllocs()
	for b.Loop() {
		if !sel.MatchesPairs(pairs) {
			b.Fatal("no match")
		}
	}
}
