package handlers

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"mime"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// command fills in who, when and the correlation id of a request.
func (a *API) command(c echo.Context, op domain.Op, ref domain.Ref, obj *domain.Object) domain.Command {
	auditObject(c, ref)
	return domain.Command{Op: op, Ref: ref, Object: obj, Actor: identityOf(c).Name,
		CorrelationID: correlationID(c), Now: a.cfg.Now(), NewUID: a.cfg.NewUID()}
}

// readBody reads a request body of the wanted media type, bounded by MaxBodyBytes.
func (a *API) readBody(c echo.Context, mediaType string) ([]byte, error) {
	return a.readBodyLimit(c, mediaType, a.cfg.MaxBodyBytes)
}

// readBodyLimit reads a request body of the wanted media type, at most limit bytes.
func (a *API) readBodyLimit(c echo.Context, mediaType string, limit int64) ([]byte, error) {
	req := c.Request()
	if ct := req.Header.Get("Content-Type"); ct != "" || mediaType != "application/json" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != mediaType {
			return nil, &domain.Error{Reason: domain.ReasonUnsupportedMediaType,
				Message: fmt.Sprintf("content type %q is not supported here; use %s", ct, mediaType)}
		}
	}
	if req.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
	if err != nil {
		return nil, domain.NewBadRequest("reading the request body: " + err.Error())
	}
	if int64(len(body)) > limit {
		return nil, tooLarge(limit)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, domain.NewBadRequest("the request body is empty")
	}
	// encoding/json would store U+FFFD for bytes that are not UTF-8 and keep
	// the last of two equal keys; both are refused. The bodies are objects
	// (or patches of them), whose shape names the paths of duplicates.
	if causes := domain.CheckJSONText(body, "", &domain.Object{}); causes != nil {
		return nil, domain.NewBadRequest("the request body is not valid: "+causeSummary(causes), causes...)
	}
	return body, nil
}

func tooLarge(limit int64) error {
	return &domain.Error{Reason: domain.ReasonRequestEntityTooLarge, Message: fmt.Sprintf("the request body is larger than %d bytes", limit)}
}

// readObject reads and strictly decodes an object body of at most limit bytes.
func (a *API) readObject(c echo.Context, mediaType string, limit int64) (*domain.Object, error) {
	body, err := a.readBodyLimit(c, mediaType, limit)
	if err != nil {
		return nil, err
	}
	obj := &domain.Object{}
	if causes := domain.DecodeStrict(body, obj, ""); causes != nil {
		return nil, domain.NewBadRequest("the request body is not a valid object: "+causeSummary(causes), causes...)
	}
	return obj, nil
}

func causeSummary(causes []domain.Cause) string {
	parts := make([]string, 0, len(causes))
	for _, c := range causes {
		if c.Field != "" {
			parts = append(parts, c.Field+": "+c.Message)
		} else {
			parts = append(parts, c.Message)
		}
	}
	return strings.Join(parts, "; ")
}

// msgID turns the Idempotency-Key header into the event's Nats-Msg-Id, scoped to
// the caller and the request line so keys of different clients never collide.
func (a *API) msgID(c echo.Context) string {
	key := c.Request().Header.Get("Idempotency-Key")
	if key == "" {
		return ""
	}
	// Length is checked by checkIdempotencyKey before any handler runs.
	h := sha256.Sum256([]byte(identityOf(c).Name + "\x00" + c.Request().Method + "\x00" + c.Request().URL.Path + "\x00" + key))
	return "idem-" + hex.EncodeToString(h[:16])
}

// MaxIdempotencyKey bounds the Idempotency-Key header.
const MaxIdempotencyKey = 255

// checkIdempotencyKey refuses keys that are too long or not printable ASCII.
func checkIdempotencyKey(c echo.Context) error {
	key := c.Request().Header.Get("Idempotency-Key")
	if len(key) > MaxIdempotencyKey {
		return domain.NewBadRequest(fmt.Sprintf("the Idempotency-Key header must be at most %d characters", MaxIdempotencyKey),
			domain.Cause{Field: "Idempotency-Key", Type: domain.CauseTooLong, Message: "too long"})
	}
	for _, r := range key {
		if r < 0x21 || r > 0x7e {
			return domain.NewBadRequest("the Idempotency-Key header must be printable ASCII without spaces",
				domain.Cause{Field: "Idempotency-Key", Type: domain.CauseInvalid, Message: "not printable ASCII"})
		}
	}
	return nil
}
