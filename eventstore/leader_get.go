package eventstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NoLeaderError is a leader read no leader answered in time: the stream
// is electing one. Nothing was read and nothing written, so the caller may
// retry; it is nats.ErrTimeout to the retry rules (temporarilyUnavailable)
// and a 503 with Retry-After to an API client.
type NoLeaderError struct {
	Stream string
	Waited time.Duration
}

func (e *NoLeaderError) Error() string {
	return fmt.Sprintf("no answer from the leader of stream %s in %s (electing one?)", e.Stream, e.Waited)
}

// Unwrap makes it a nats.ErrTimeout.
func (e *NoLeaderError) Unwrap() error { return nats.ErrTimeout }

// leaderGetTimeout bounds one leaderLastMsg request (a caller's earlier
// deadline ends it sooner).
var leaderGetTimeout = 5 * time.Second // a variable for its test

// leaderLastMsg reads a stream's newest message on subject from the
// stream's leader. nats.go reads a stream that allows direct gets through
// the direct-get API, which a follower answers too once it is 90 %
// synchronised: a read right after another replica's write, or after a
// failover, can come back one write old. A state or lock that decides
// what a run does must be the leader's.
//
// A stream without a leader (just created, or electing one) leaves the
// request unanswered: every server listens on the API subject, so there is
// no "no responders" either. The wait is bounded by leaderGetTimeout,
// nats.go's own API timeout, also under a caller's later deadline, and ends
// in a NoLeaderError, which Load and ClusterNotReady retry.
func leaderLastMsg(ctx context.Context, nc *nats.Conn, stream, subject string) (*jetstream.RawStreamMsg, error) {
	req, err := json.Marshal(map[string]string{"last_by_subj": subject})
	if err != nil {
		return nil, err
	}
	// Bounded whatever the caller's deadline: an apply run's is 30 minutes,
	// and a run whose state read met a leader election waited all of it
	// (CI, TestRollingUpgradeFromTheLastRelease: an Apply in Planning for good).
	rctx, cancel := context.WithTimeout(ctx, leaderGetTimeout)
	defer cancel()
	resp, err := nc.RequestWithContext(rctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		if rctx.Err() != nil && ctx.Err() == nil {
			return nil, &NoLeaderError{Stream: stream, Waited: leaderGetTimeout}
		}
		return nil, err
	}
	var r struct {
		Error   *apiError `json:"error"`
		Message *struct {
			Subject  string    `json:"subject"`
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs"`
			Data     []byte    `json:"data"`
			Time     time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, fmt.Errorf("decoding the message of %s: %w", subject, err)
	}
	if r.Error != nil {
		if r.Error.ErrCode == 10037 { // no message found
			return nil, jetstream.ErrMsgNotFound
		}
		return nil, r.Error
	}
	if r.Message == nil {
		return nil, fmt.Errorf("no message in the answer for %s", subject)
	}
	msg := &jetstream.RawStreamMsg{Subject: r.Message.Subject, Sequence: r.Message.Sequence, Data: r.Message.Data, Time: r.Message.Time}
	if len(r.Message.Header) > 0 {
		if msg.Header, err = nats.DecodeHeadersMsg(r.Message.Header); err != nil {
			return nil, fmt.Errorf("decoding the headers of %s: %w", subject, err)
		}
	}
	return msg, nil
}
