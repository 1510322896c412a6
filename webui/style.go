package webui

import (
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// htmxConfig: swap error answers too (forms show the API's causes, other
// errors retarget to the flash area), and no inline indicator styles.
const htmxConfig = `{"includeIndicatorStyles":false,"allowEval":false,"responseHandling":[{"code":"204","swap":false},{"code":"[23]..","swap":true},{"code":"[45]..","swap":true,"error":true}]}`

// Shared Tailwind class lists; Tailwind finds them in this file.
const (
	inputClass      = "mt-1 block w-full rounded border border-slate-300 bg-white px-2 py-1.5 text-sm focus:border-indigo-500 focus:outline-none focus:ring-1 focus:ring-indigo-500"
	primaryButton   = "inline-flex items-center justify-center rounded bg-indigo-600 px-3 py-1.5 text-sm font-medium text-white hover:bg-indigo-500 disabled:opacity-50"
	secondaryButton = "inline-flex items-center justify-center rounded border border-slate-300 bg-white px-3 py-1.5 text-sm font-medium hover:bg-slate-50"
	dangerButton    = "inline-flex items-center justify-center rounded bg-red-600 px-3 py-1.5 text-sm font-medium text-white hover:bg-red-500"
	smallButton     = "inline-flex items-center justify-center rounded border border-slate-300 bg-white px-2 py-0.5 text-xs font-medium hover:bg-slate-50"
	tableClass      = "min-w-full divide-y divide-slate-200 text-sm"
	thClass         = "px-3 py-2 text-left text-xs font-semibold uppercase tracking-wide text-slate-500"
	tdClass         = "whitespace-nowrap px-3 py-2"
	tableWrap       = "relative overflow-x-auto" // relative: an sr-only header (absolute) stays inside the scroll box
	linkClass       = "text-indigo-700 hover:underline"
	preClass        = "max-h-96 overflow-auto rounded bg-slate-900 p-3 font-mono text-xs leading-relaxed text-slate-100"
)

func csrfHeaders(token string) string {
	b, _ := json.Marshal(map[string]string{csrfHeader: token})
	return string(b)
}

func phaseClass(phase string) string {
	switch phase {
	case "Ready", "Running", "Succeeded", "True", "Healthy", "Completed":
		return "bg-emerald-100 text-emerald-800"
	case "Failed", "False", "Unhealthy", "RolledBack", "Error":
		return "bg-red-100 text-red-800"
	case "Degraded", "Canceled", "Unknown", "Deleting", "Terminating":
		return "bg-amber-100 text-amber-800"
	case "":
		return "bg-slate-100 text-slate-500"
	}
	return "bg-sky-100 text-sky-800"
}

func httpStatusText(code int) string {
	if t := http.StatusText(code); t != "" {
		return t
	}
	return "Error"
}

// ago renders a time as a short age ("3m", "2h"), the way kubectl does.
func ago(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return shortDuration(time.Since(*t))
}

func shortDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return itoa(int(d/time.Minute)) + "m"
	case d < 48*time.Hour:
		return itoa(int(d/time.Hour)) + "h"
	}
	return itoa(int(d/(24*time.Hour))) + "d"
}

func itoa(i int) string { return strconv.Itoa(i) }

// labelString renders labels as k=v,k=v in key order.
func labelString(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}
