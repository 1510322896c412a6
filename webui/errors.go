package webui

import (
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// formErrors is an API refusal laid out for a form: the message, and each
// Status cause under the field it names (e.g. "spec.count"), so it is shown
// next to that field.
type formErrors struct {
	Message string
	Fields  map[string][]string
	// Other are causes naming no field of the form.
	Other []string
}

// Field returns the messages for one field.
func (f formErrors) Field(name string) []string { return f.Fields[name] }

// Any reports whether there is anything to show.
func (f formErrors) Any() bool { return f.Message != "" || len(f.Fields) > 0 || len(f.Other) > 0 }

// toFormErrors spreads err's causes over the form's fields (named by the JSON
// path the API reports); causes about other fields are kept in Other.
func toFormErrors(err error, fields ...string) formErrors {
	fe := formErrors{Fields: map[string][]string{}}
	var de *domain.Error
	if !errors.As(err, &de) {
		fe.Message = err.Error()
		return fe
	}
	fe.Message = de.Message
	for _, cause := range de.Causes {
		placed := false
		for _, f := range fields {
			if cause.Field == f || strings.HasPrefix(cause.Field, f+".") || strings.HasPrefix(cause.Field, f+"[") {
				fe.Fields[f] = append(fe.Fields[f], cause.Message)
				placed = true
				break
			}
		}
		if !placed {
			msg := cause.Message
			if cause.Field != "" {
				msg = cause.Field + ": " + msg
			}
			fe.Other = append(fe.Other, msg)
		}
	}
	return fe
}

// fail answers an error: htmx requests get a message in the page's flash area
// (whatever they targeted), page loads an error page. The status code is the
// API's.
func (u *UI) fail(c echo.Context, err error) error {
	code := errorCode(err)
	var de *domain.Error
	if errors.As(err, &de) && de.RetryAfterSeconds > 0 {
		c.Response().Header().Set("Retry-After", strconv.Itoa(de.RetryAfterSeconds))
	}
	if code >= 500 {
		u.log.Error("web ui request failed", "path", c.Request().URL.Path, "err", err)
	}
	if domain.ReasonOf(err) == domain.ReasonUnauthorized {
		return u.toLogin(c)
	}
	if isLive(c) {
		// A live stream that cannot start for good (its object is gone or
		// not visible, the role may not read it) ends with a message; other
		// failures answer an error, and the browser tries again later.
		switch domain.ReasonOf(err) {
		case domain.ReasonNotFound:
			return u.endLiveNow(c, &liveEnd{Message: "Not found: it was deleted, or you may no longer see it (" + errorMessage(err) + "). Live updates have stopped."})
		case domain.ReasonForbidden:
			return u.endLiveNow(c, &liveEnd{Message: errorMessage(err) + ". Live updates have stopped."})
		}
	}
	if isHTMX(c) {
		h := c.Response().Header()
		h.Set("HX-Retarget", "#flash")
		h.Set("HX-Reswap", "innerHTML")
		return render(c, code, Flash("error", errorMessage(err)))
	}
	return render(c, code, ErrorPage(u, viewerOf(c), code, errorMessage(err)))
}

func errorMessage(err error) string {
	var de *domain.Error
	if errors.As(err, &de) {
		msg := de.Message
		for _, cause := range de.Causes {
			if cause.Field != "" {
				msg += fmt.Sprintf("; %s: %s", cause.Field, cause.Message)
			}
		}
		return msg
	}
	return err.Error()
}

// errorHandler answers echo's own errors (no route, bad method, too large).
func (u *UI) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		msg := fmt.Sprint(he.Message)
		if he.Code == http.StatusNotFound {
			msg = "there is no such page"
		}
		if isHTMX(c) {
			c.Response().Header().Set("HX-Retarget", "#flash")
			c.Response().Header().Set("HX-Reswap", "innerHTML")
			_ = render(c, he.Code, Flash("error", msg))
			return
		}
		_ = render(c, he.Code, ErrorPage(u, viewerOf(c), he.Code, msg))
		return
	}
	_ = u.fail(c, err)
}

// recover turns a panic into a 500 page and a log line, never a dropped connection.
func (u *UI) recover(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if p := recover(); p != nil {
				u.log.Error("web ui panic", "path", c.Request().URL.Path, "panic", p, "stack", string(debug.Stack()))
				err = u.fail(c, domain.NewInternal(fmt.Errorf("%v", p)))
			}
		}()
		return next(c)
	}
}
