package handlers_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkAPICreate measures POST /api/v1/tenants end to end (HTTP, decode,
// Decide, append with expected sequence, read-model wait) with parallel clients.
func BenchmarkAPICreate(b *testing.B) {
	s := newStack(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			body := fmt.Sprintf(`{"metadata":{"name":"t%d","labels":{"bench":"yes"}},"spec":{}}`, i)
			req, _ := http.NewRequest(http.MethodPost, s.srv.URL+"/api/v1/tenants", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+testToken)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	})
}

// BenchmarkRawPublish is the floor BenchmarkAPICreate is compared with: a
// synchronous JetStream publish with the expected-subject-sequence header.
func BenchmarkRawPublish(b *testing.B) {
	s := newStack(b)
	js := s.env.Store.JetStream()
	ctx := context.Background()
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}}); err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	payload := make([]byte, 600)
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		subj := "raw." + strconv.FormatInt(n.Add(1), 10)
		var last uint64
		for pb.Next() {
			msg := &nats.Msg{Subject: subj, Data: payload, Header: nats.Header{}}
			msg.Header.Set("Nats-Expected-Last-Subject-Sequence", strconv.FormatUint(last, 10))
			ack, err := js.PublishMsg(ctx, msg)
			if err != nil {
				b.Fatal(err)
			}
			last = ack.Sequence
		}
	})
}
