package eventstore

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// newestGrowth is how much each backwards round widens the range it reads.
const newestGrowth = 4

// newest returns the newest n messages of the window on stream that match
// subjects and keep, in stream order (oldest first), and how many backwards
// rounds it took. It does not read the window from its start: it resolves
// the window to sequences [start, end], reads [end-k+1, end] with the
// subject filters, and while fewer than n messages matched and start is not
// reached, reads the k' = newestGrowth*k sequences before that, and so on.
// keep decodes a matching message and says whether it counts (a filter
// applied in process, such as the audit log's actor); it is called in
// stream order within a round, rounds going backwards.
func newest[T any](ctx context.Context, js jetstream.JetStream, stream string, w Window, subjects []string, n int,
	keep func(scanned) (T, bool, error)) (out []T, rounds int, err error) {
	if n <= 0 {
		return nil, 0, fmt.Errorf("newest must be positive, got %d", n)
	}
	start, end, err := resolveWindow(ctx, js, stream, w)
	if err != nil {
		return nil, 0, err
	}
	if start > end {
		return []T{}, 0, nil
	}
	// What each round kept, newest round first; a round keeps at most the
	// newest items of its range that were still needed.
	var found [][]T
	have := 0
	k := uint64(n)
	for hi := end; ; {
		lo := start
		if hi-start >= k {
			lo = hi - k + 1
		}
		rounds++
		need := n - have
		var got []T
		err := scan(ctx, js, stream, Window{From: Position{After: lo - 1}, UntilSeq: hi}, subjects, func(m scanned) (bool, error) {
			v, ok, err := keep(m)
			if err != nil {
				return false, err
			}
			if ok {
				got = append(got, v)
				if len(got) > need {
					// Only the newest need of this range can be in the answer.
					got = got[1:]
				}
			}
			return true, nil
		})
		if err != nil {
			return nil, rounds, err
		}
		found = append(found, got)
		have += len(got)
		if have >= n || lo == start {
			break
		}
		hi = lo - 1
		if k > math.MaxUint64/newestGrowth {
			k = math.MaxUint64
		} else {
			k *= newestGrowth
		}
	}
	out = make([]T, 0, have)
	for i := len(found) - 1; i >= 0; i-- {
		out = append(out, found[i]...)
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out, rounds, nil
}

// resolveWindow turns a window into the sequences it spans on stream now:
// [start, end], inclusive; start > end when the window holds nothing. Time
// bounds are resolved the way scan applies them: the window starts with the
// first message stored at or after From.Time and ends before the first
// message stored after Until.
func resolveWindow(ctx context.Context, js jetstream.JetStream, stream string, w Window) (start, end uint64, err error) {
	var info *jetstream.StreamInfo
	err = retryUnavailable(ctx, func() error {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		info = st.CachedInfo()
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("reading the bounds of %s: %w", stream, err)
	}
	if info.State.Msgs == 0 {
		return 1, 0, nil
	}
	start, end = info.State.FirstSeq, info.State.LastSeq
	if w.UntilSeq > 0 && w.UntilSeq < end {
		end = w.UntilSeq
	}
	if !w.Until.IsZero() {
		past, ok, err := firstStoredAt(ctx, js, stream, w.Until.Add(time.Nanosecond))
		if err != nil {
			return 0, 0, err
		}
		if ok && past-1 < end {
			end = past - 1
		}
	}
	if !w.From.Time.IsZero() {
		first, ok, err := firstStoredAt(ctx, js, stream, w.From.Time)
		if err != nil {
			return 0, 0, err
		}
		if !ok {
			return 1, 0, nil
		}
		start = max(start, first)
	} else if w.From.After >= start {
		if w.From.After >= end {
			return 1, 0, nil
		}
		start = w.From.After + 1
	}
	if start > end {
		return 1, 0, nil
	}
	return start, end, nil
}

// firstStoredAt is the sequence of the first message of stream stored at
// or after t; ok is false when there is none.
func firstStoredAt(ctx context.Context, js jetstream.JetStream, stream string, t time.Time) (seq uint64, ok bool, err error) {
	err = scanBatched(ctx, js, stream, Window{From: Position{Time: t}}, nil, 1, func(m scanned) (bool, error) {
		seq, ok = m.seq, true
		return false, nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("finding the first message of %s stored at %s: %w", stream, t.Format(time.RFC3339Nano), err)
	}
	return seq, ok, nil
}
