package webui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/identity"
)

// backend calls the REST API's handler in process on behalf of the user of a
// UI request: it forwards only the session cookie and the client address, so
// the API authenticates, authorizes and audits exactly as for a direct call.
type backend struct {
	api http.Handler
}

// apiRequest is one call: Path is below /api/v1 and may carry a query.
type apiRequest struct {
	Method string
	Path   string
	// Body is encoded as JSON unless it is already []byte.
	Body any
	// ContentType defaults to application/json when there is a body.
	ContentType string
}

// newRequest builds the in-process request from the user's request.
func (b backend) newRequest(ctx context.Context, from *http.Request, r apiRequest) (*http.Request, error) {
	var body io.Reader
	if r.Body != nil {
		raw, ok := r.Body.([]byte)
		if !ok {
			var err error
			if raw, err = json.Marshal(r.Body); err != nil {
				return nil, fmt.Errorf("encoding the request: %w", err)
			}
		}
		body = bytes.NewReader(raw)
	}
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequestWithContext(ctx, method, "/api/v1"+r.Path, body)
	if err != nil {
		return nil, domain.NewBadRequest(fmt.Sprintf("building the request for %s: %v", r.Path, err))
	}
	if r.Body != nil {
		ct := r.ContentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "rezuscloud-webui")
	// The call is made in process, by the UI, for a page request whose own
	// CSRF token the UI has checked: it is same-origin by construction.
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.RemoteAddr = from.RemoteAddr
	// The API believes it only from a trusted proxy (--trusted-proxies).
	if xff := from.Header.Values("X-Forwarded-For"); len(xff) > 0 {
		req.Header["X-Forwarded-For"] = xff
	}
	if c, err := from.Cookie(identity.SessionCookie); err == nil {
		req.AddCookie(c)
	}
	return req, nil
}

// call performs r and decodes a successful JSON answer into out (unless nil).
// An error answer comes back as the *domain.Error its Status describes.
func (b backend) call(from *http.Request, r apiRequest, out any) error {
	_, err := b.callRaw(from, r, out)
	return err
}

// callRaw is call that also returns the answer, for its headers and cookies.
func (b backend) callRaw(from *http.Request, r apiRequest, out any) (*bufferedResponse, error) {
	req, err := b.newRequest(from.Context(), from, r)
	if err != nil {
		return nil, err
	}
	rec := &bufferedResponse{header: http.Header{}}
	b.api.ServeHTTP(rec, req)
	if rec.code == 0 {
		rec.code = http.StatusOK
	}
	if rec.code >= 400 {
		return rec, statusError(rec.code, rec.body.Bytes())
	}
	if out != nil {
		if raw, ok := out.(*[]byte); ok {
			*raw = append((*raw)[:0], rec.body.Bytes()...)
			return rec, nil
		}
		if err := json.Unmarshal(rec.body.Bytes(), out); err != nil {
			return rec, fmt.Errorf("decoding the answer of %s %s: %w", r.Method, r.Path, err)
		}
	}
	return rec, nil
}

// stream performs r and returns the body as it is written, for answers that
// never end on their own (follow=true logs, watches). Closing the reader, or
// ending ctx, stops the handler.
func (b backend) stream(ctx context.Context, from *http.Request, r apiRequest) (io.ReadCloser, error) {
	ctx, cancel := context.WithCancel(ctx)
	req, err := b.newRequest(ctx, from, r)
	if err != nil {
		cancel()
		return nil, err
	}
	pr, pw := io.Pipe()
	w := &pipeResponse{header: http.Header{}, pw: pw, started: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.api.ServeHTTP(w, req)
		w.start(http.StatusOK)
		pw.Close()
	}()
	select {
	case <-w.started:
	case <-ctx.Done():
		cancel()
		pr.Close()
		<-done
		return nil, ctx.Err()
	}
	if w.code >= 400 {
		body, _ := io.ReadAll(io.LimitReader(pr, 1<<20))
		cancel()
		pr.Close()
		<-done
		return nil, statusError(w.code, body)
	}
	return &streamBody{PipeReader: pr, cancel: cancel, done: done}, nil
}

// statusError turns an error answer back into the domain error it describes.
func statusError(code int, body []byte) error {
	var st domain.Status
	if err := json.Unmarshal(body, &st); err != nil || st.Reason == "" {
		return &domain.Error{Reason: reasonFor(code), Message: strings.TrimSpace(string(body))}
	}
	e := &domain.Error{Reason: st.Reason, Message: st.Message}
	if st.Details != nil {
		e.Kind, e.Name, e.Causes, e.RetryAfterSeconds = st.Details.Kind, st.Details.Name, st.Details.Causes, st.Details.RetryAfterSeconds
	}
	return e
}

func reasonFor(code int) domain.Reason {
	switch code {
	case http.StatusNotFound:
		return domain.ReasonNotFound
	case http.StatusUnauthorized:
		return domain.ReasonUnauthorized
	case http.StatusForbidden:
		return domain.ReasonForbidden
	case http.StatusConflict:
		return domain.ReasonConflict
	case http.StatusBadRequest:
		return domain.ReasonBadRequest
	}
	return domain.ReasonInternalError
}

// errorCode is the HTTP code an error from the backend maps to.
func errorCode(err error) int {
	var e *domain.Error
	if errors.As(err, &e) {
		return e.Reason.Code()
	}
	return http.StatusInternalServerError
}

// bufferedResponse collects a whole answer.
type bufferedResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *bufferedResponse) Header() http.Header { return r.header }
func (r *bufferedResponse) Write(p []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.body.Write(p)
}
func (r *bufferedResponse) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

// Flush lets streaming handlers run against a buffer (they end when the answer does).
func (r *bufferedResponse) Flush() {}

// cookies are the cookies the API set, to pass on to the browser.
func (r *bufferedResponse) cookies() []*http.Cookie {
	return (&http.Response{Header: r.header}).Cookies()
}

// pipeResponse hands a streaming answer to a reader as it is written.
type pipeResponse struct {
	header  http.Header
	pw      *io.PipeWriter
	code    int
	once    sync.Once
	started chan struct{}
}

func (r *pipeResponse) Header() http.Header { return r.header }
func (r *pipeResponse) start(code int) {
	r.once.Do(func() {
		r.code = code
		close(r.started)
	})
}
func (r *pipeResponse) WriteHeader(code int) { r.start(code) }
func (r *pipeResponse) Write(p []byte) (int, error) {
	r.start(http.StatusOK)
	return r.pw.Write(p)
}
func (r *pipeResponse) Flush() { r.start(http.StatusOK) }

// streamBody stops the handler when closed and waits for it.
type streamBody struct {
	*io.PipeReader
	cancel context.CancelFunc
	done   chan struct{}
}

func (s *streamBody) Close() error {
	s.cancel()
	s.PipeReader.Close()
	<-s.done
	return nil
}

// query builds "?k=v&..." from pairs, leaving out empty values.
func query(pairs ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] != "" {
			v.Set(pairs[i], pairs[i+1])
		}
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}
