package handlers

import (
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus series, on a registry of their own.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	watches  prometheus.Gauge
}

func newMetrics(a *API) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rezus_http_requests_total", Help: "HTTP requests by method, route and status code.",
	}, []string{"method", "route", "code"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "rezus_http_request_duration_seconds", Help: "HTTP request latency by method and route (watches excluded).",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"method", "route"})
	m.watches = prometheus.NewGauge(prometheus.GaugeOpts{Name: "rezus_watches_active", Help: "Open watch streams."})
	m.reg.MustRegister(m.requests, m.latency, m.watches, certificateCollector{cache: a.cache},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "rezus_events_appended_total", Help: "Events this process appended to the stream."},
			func() float64 { return float64(a.store.Appended()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "rezus_append_conflicts_total", Help: "Appends refused because the object had changed (409)."},
			func() float64 { return float64(a.store.Conflicts()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "rezus_poison_records_total", Help: "Records of the event or audit stream this process skipped because they cannot be decoded (each kept in REZUS_DEAD_LETTERS and logged)."},
			func() float64 { return float64(a.store.PoisonRecords()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "rezus_audit_records_lost_total", Help: "Audit records that could not be stored (each is logged in full)."},
			func() float64 {
				if a.audit == nil {
					return 0
				}
				return float64(a.audit.Lost())
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rezus_read_model_sequence", Help: "Last stream sequence applied to this replica's read model."},
			func() float64 { return float64(a.cache.Seq()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rezus_projection_lag_events", Help: "Events the KV projector is behind this replica's read model."},
			func() float64 {
				if a.projector == nil {
					return 0
				}
				seq, ck := a.cache.Seq(), a.projector.Checkpoint()
				if ck >= seq {
					return 0
				}
				return float64(seq - ck)
			}),
	)
	return m
}

func (m *metrics) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		code := c.Response().Status
		if err != nil {
			// The error handler runs after us; record what it will send.
			code = statusCodeOf(err)
		}
		m.requests.WithLabelValues(c.Request().Method, route, strconv.Itoa(code)).Inc()
		if c.QueryParam("watch") == "" {
			m.latency.WithLabelValues(c.Request().Method, route).Observe(time.Since(start).Seconds())
		}
		return err
	}
}

func (a *API) metricsHandler(c echo.Context) error {
	promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{}).ServeHTTP(c.Response(), c.Request())
	return nil
}
