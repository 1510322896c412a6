package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rezuscloud/rezuscloud/domain"
)

// autoscaleVersion is the cluster-autoscaler hack/autoscaler.sh builds.
const autoscaleVersion = "1.33.0"

// The tenant, its autoscaled group and the Deployment that loads it.
const (
	autoscaleTenantName = "auto"
	autoscaleGroup      = "workers"
	autoscaleApp        = "load"
)

func autoscaleCommand() *cli.Command {
	return &cli.Command{
		Name:  "autoscale",
		Usage: "measure the autoscaler path end to end: the real cluster-autoscaler against the emulator's real kube-apiserver (issue 48)",
		Description: "Starts `rezuscloud serve --with-emulator --emulator-kube on --autoscaler-listen` as a child process,\n" +
			"builds a tenant of one control plane and a worker group `workers` of 1..2 machines (labels pool=auto;\n" +
			"4-CPU emulated Nodes), issues an autoscaler certificate and runs the real cluster-autoscaler against\n" +
			"the tenant's kube-apiserver and RezusCloud's externalgrpc service. A Deployment `load` of 3-CPU pods\n" +
			"runs one pod on workers; each cycle scales it to 2 (the new pod is Pending: no room), waits until\n" +
			"that pod runs on a new Node, scales it back to 1 and waits until the group is back at 1 machine and\n" +
			"the cluster at 2 Nodes. Per cycle it splits pod created → Node Ready into the autoscaler's decision\n" +
			"(its NodeGroupScaled event), our debounce and queue, tofu, the rest of the apply, and apply end →\n" +
			"Node Ready (emulator boot, kubelet, config push), and reports p50/p95 (nearest rank) over the cycles\n" +
			"and the scale-down time. At the end it counts orphaned machines (emulator nodes no Machine names,\n" +
			"Machines no group keeps) and resurrected ones (a machine built again after its MachineDeleted, a\n" +
			"Node registered again after it was deleted); it fails unless both are 0.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "cycles", Value: 10, Usage: "scale-up/scale-down cycles to measure"},
			&cli.DurationFlag{Name: "scale-down-unneeded-time", Value: 10 * time.Second, Usage: "the autoscaler's --scale-down-unneeded-time"},
			&cli.DurationFlag{Name: "scan-interval", Value: 2 * time.Second, Usage: "the autoscaler's --scan-interval"},
			&cli.DurationFlag{Name: "apply-debounce", Value: 1500 * time.Millisecond, Usage: "the server's --apply-debounce"},
			&cli.DurationFlag{Name: "cycle-timeout", Value: 6 * time.Minute, Usage: "give up when a scale-up or a scale-down takes longer"},
			&cli.StringFlag{Name: "tools", EnvVars: []string{"REZUS_TOOLS_DIR"}, Value: ".tools", Usage: "the tools dir `go tool task tools` built (tofu, the provider mirror, etcd and Kubernetes, the cluster-autoscaler)"},
			&cli.StringFlag{Name: "tofu", EnvVars: []string{"REZUSCLOUD_TOFU"}, Usage: "the tofu binary (default: <tools>/bin/tofu)"},
			&cli.StringFlag{Name: "provider-mirror", EnvVars: []string{"REZUSCLOUD_PROVIDER_MIRROR"}, Usage: "the provider mirror (default: <tools>/mirror)"},
			&cli.StringFlag{Name: "autoscaler", Usage: "the cluster-autoscaler binary (default: <tools>/autoscaler/" + autoscaleVersion + "/cluster-autoscaler)"},
			&cli.StringFlag{Name: "data-dir", Usage: "data dir for the server and the autoscaler's files and log (default: a new temp dir, removed afterwards)"},
		},
		Action: runBenchAutoscale,
	}
}

// autoscaleCycle is what one cycle observed. Local times (the pod, the
// Node, the scale calls) and the server's (events, applies) are of the
// same host's clock.
type autoscaleCycle struct {
	// PodCreated is when the new pod's ADDED reached the informer.
	PodCreated time.Time
	// Scaled is the NodeGroupScaled event that grew the group.
	Scaled     time.Time
	ApplyStart time.Time
	ApplyEnd   time.Time
	Tofu       time.Duration
	// NodeReady is when the new Node's Ready condition first read True.
	NodeReady  time.Time
	PodRunning time.Time
	// DownStart is the scale of the Deployment back to 1; DownScaled the
	// NodeGroupScaled event that shrank the group; DownDone when the group
	// was back at 1 machine, 2 Nodes and no apply open.
	DownStart, DownScaled, DownDone time.Time
}

// autoscaleSplit is a cycle's figures.
type autoscaleSplit struct {
	Total, Decision, Queue, Tofu, ApplyRest, Boot, Schedule, DownDecision, Down time.Duration
}

// split breaks pod created → Node Ready into its parts, which add up to it.
func (c *autoscaleCycle) split() autoscaleSplit {
	wall := c.ApplyEnd.Sub(c.ApplyStart)
	return autoscaleSplit{
		Total:        c.NodeReady.Sub(c.PodCreated),
		Decision:     c.Scaled.Sub(c.PodCreated),
		Queue:        c.ApplyStart.Sub(c.Scaled),
		Tofu:         c.Tofu,
		ApplyRest:    wall - c.Tofu,
		Boot:         c.NodeReady.Sub(c.ApplyEnd),
		Schedule:     c.PodRunning.Sub(c.NodeReady),
		DownDecision: c.DownScaled.Sub(c.DownStart),
		Down:         c.DownDone.Sub(c.DownStart),
	}
}

// autoscaleRows are the table's rows: a name and the figure of a split.
var autoscaleRows = []struct {
	name string
	of   func(autoscaleSplit) time.Duration
}{
	{"pod created → Node Ready (the figure)", func(s autoscaleSplit) time.Duration { return s.Total }},
	{"· pod created → NodeGroupScaled (the autoscaler's decision)", func(s autoscaleSplit) time.Duration { return s.Decision }},
	{"· NodeGroupScaled → apply start (ours: debounce + queue)", func(s autoscaleSplit) time.Duration { return s.Queue }},
	{"· apply: tofu", func(s autoscaleSplit) time.Duration { return s.Tofu }},
	{"· apply: the rest (ours)", func(s autoscaleSplit) time.Duration { return s.ApplyRest }},
	{"· apply end → Node Ready (emulator boot, kubelet, config push)", func(s autoscaleSplit) time.Duration { return s.Boot }},
	{"Node Ready → pod Running (scheduler, kubelet)", func(s autoscaleSplit) time.Duration { return s.Schedule }},
	{"scale to 1 → NodeGroupScaled (unneeded time + decision)", func(s autoscaleSplit) time.Duration { return s.DownDecision }},
	{"scale to 1 → 1 machine, 2 Nodes (the scale-down)", func(s autoscaleSplit) time.Duration { return s.Down }},
}

// nearestRank is the p-th percentile of ds by nearest rank: the smallest
// value with at least p% of the values at or below it (p95 of 10 values is
// the largest; p50 of 2 the smaller).
func nearestRank(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.999999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

// autoscaleTable is the figures over the cycles as a Markdown table.
func autoscaleTable(splits []autoscaleSplit) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| step (%d cycles) | p50 | p95 | max |\n|---|---|---|---|\n", len(splits))
	for _, r := range autoscaleRows {
		var ds []time.Duration
		for _, s := range splits {
			ds = append(ds, r.of(s))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.name, secs(nearestRank(ds, 50)), secs(nearestRank(ds, 95)), secs(nearestRank(ds, 100)))
	}
	return b.String()
}

// benchEvent is one event as /api/v1/events serves it, with the fields
// this bench reads.
type benchEvent struct {
	Seq    uint64    `json:"seq"`
	Type   string    `json:"type"`
	Actor  string    `json:"actor"`
	Time   time.Time `json:"time"`
	Object struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Count int `json:"count"`
		} `json:"spec"`
	} `json:"object"`
}

// events is every event of the query, page after page.
func (e *benchEnv) events(ctx context.Context, query string) ([]benchEvent, error) {
	var out []benchEvent
	from := "since=0"
	for {
		code, b, err := e.request(ctx, http.MethodGet, "/api/v1/events?"+query+"&limit=10000&"+from, "", "")
		if err != nil {
			return nil, err
		}
		if code != http.StatusOK {
			return nil, fmt.Errorf("GET /api/v1/events?%s: %d %s", query, code, b)
		}
		var l struct {
			Metadata struct {
				Continue string `json:"continue"`
			} `json:"metadata"`
			Items []benchEvent `json:"items"`
		}
		if err := json.Unmarshal(b, &l); err != nil {
			return nil, err
		}
		out = append(out, l.Items...)
		if l.Metadata.Continue == "" || len(l.Items) == 0 {
			return out, nil
		}
		from = "continue=" + url.QueryEscape(l.Metadata.Continue)
	}
}

// scaleEvent is the first NodeGroupScaled event after seq that moved the
// group's count up (up) or down, from the group's whole history in order.
func scaleEvent(evs []benchEvent, after uint64, up bool) (benchEvent, bool) {
	prev := -1
	for _, ev := range evs {
		c := ev.Object.Spec.Count
		if ev.Seq > after && ev.Type == "NodeGroupScaled" && prev >= 0 && (up && c > prev || !up && c < prev) {
			return ev, true
		}
		prev = c
	}
	return benchEvent{}, false
}

// applyFor is the apply that built a scale event: the first (by start)
// whose sources name it, else the first that started after it.
func applyFor(applies []domain.Apply, group string, ev benchEvent) (domain.Apply, bool) {
	as := slices.Clone(applies)
	as = slices.DeleteFunc(as, func(a domain.Apply) bool { return a.Status.StartTime == nil })
	sort.SliceStable(as, func(i, j int) bool { return as[i].Status.StartTime.Before(*as[j].Status.StartTime) })
	source := fmt.Sprintf("%s/%s@%d", domain.NodeGroupKind.Kind, group, ev.Seq)
	for _, a := range as {
		if slices.Contains(a.Spec.Sources, source) {
			return a, true
		}
	}
	for _, a := range as {
		if !a.Status.StartTime.Before(ev.Time) {
			return a, true
		}
	}
	return domain.Apply{}, false
}

// rebuiltMachines names the machines created again after a MachineDeleted
// of theirs, from a tenant's Machine events in order.
func rebuiltMachines(evs []benchEvent) []string {
	gone := map[string]bool{}
	var out []string
	for _, ev := range evs {
		name := ev.Object.Metadata.Name
		switch ev.Type {
		case "MachineDeleted":
			gone[name] = true
		case "MachineCreated":
			if gone[name] && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	return out
}

// emulatorNode is one node of GET /v1/nodes of the emulator API.
type emulatorNode struct {
	Name    string `json:"name"`
	Cluster string `json:"cluster"`
}

// orphans are the tenant's emulator nodes no Machine names (by hostname
// or name) and the Machines no node group keeps (a group gone, or a
// machine not among the group's members).
func orphans(tenant string, nodes []emulatorNode, machines []domain.Machine, groups []domain.NodeGroup) (unnamed, unkept []string) {
	named := map[string]bool{}
	for _, m := range machines {
		named[m.Metadata.Name] = true
		if m.Spec.Hostname != "" {
			named[m.Spec.Hostname] = true
		}
	}
	for _, n := range nodes {
		if n.Cluster == tenant && !named[n.Name] {
			unnamed = append(unnamed, n.Name)
		}
	}
	kept := map[string]bool{}
	for _, g := range groups {
		for _, name := range g.Spec.MachineNames(g.Metadata.Name) {
			kept[name] = true
		}
	}
	for _, m := range machines {
		if !kept[m.Metadata.Name] {
			unkept = append(unkept, m.Metadata.Name)
		}
	}
	return unnamed, unkept
}

// nodeHistory follows the cluster's Nodes: when each current one appeared
// and first read Ready, and the names that registered again after they
// were deleted.
type nodeHistory struct {
	mu      sync.Mutex
	ready   map[string]time.Time
	current map[string]bool
	deleted map[string]bool
	back    []string
}

func newNodeHistory() *nodeHistory {
	return &nodeHistory{ready: map[string]time.Time{}, current: map[string]bool{}, deleted: map[string]bool{}}
}

func (h *nodeHistory) seen(name string, ready bool, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.current[name] && h.deleted[name] && !slices.Contains(h.back, name) {
		h.back = append(h.back, name)
	}
	h.current[name] = true
	if _, ok := h.ready[name]; ready && !ok {
		h.ready[name] = at
	}
}

func (h *nodeHistory) gone(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.current, name)
	delete(h.ready, name)
	h.deleted[name] = true
}

func (h *nodeHistory) readyAt(name string) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.ready[name]
	return t, ok
}

func (h *nodeHistory) names() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for n := range h.current {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (h *nodeHistory) resurrected() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.back)
}

// podHistory follows the Deployment's pods: when each appeared, when it
// first read Running and on which Node.
type podHistory struct {
	mu      sync.Mutex
	added   map[string]time.Time
	running map[string]time.Time
	node    map[string]string
}

func (h *podHistory) seen(p *corev1.Pod, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.added[p.Name]; !ok {
		h.added[p.Name] = at
	}
	if _, ok := h.running[p.Name]; !ok && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
		h.running[p.Name] = at
		h.node[p.Name] = p.Spec.NodeName
	}
}

// newRunning is a pod not in before that runs on a Node not in nodes.
func (h *podHistory) newRunning(before map[string]bool, nodes []string) (name, node string, added, running time.Time, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for p, at := range h.running {
		if !before[p] && !slices.Contains(nodes, h.node[p]) {
			return p, h.node[p], h.added[p], at, true
		}
	}
	return "", "", time.Time{}, time.Time{}, false
}

func (h *podHistory) names() map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]bool{}
	for p := range h.added {
		out[p] = true
	}
	return out
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// watchKube starts informers on the cluster's Nodes and the Deployment's
// pods; they run until ctx ends.
func watchKube(ctx context.Context, k kubernetes.Interface) (*nodeHistory, *podHistory, error) {
	nh := newNodeHistory()
	ph := &podHistory{added: map[string]time.Time{}, running: map[string]time.Time{}, node: map[string]string{}}
	nf := informers.NewSharedInformerFactory(k, 0)
	if _, err := nf.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { n := o.(*corev1.Node); nh.seen(n.Name, nodeReady(n), time.Now()) },
		UpdateFunc: func(_, o any) { n := o.(*corev1.Node); nh.seen(n.Name, nodeReady(n), time.Now()) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if n, ok := o.(*corev1.Node); ok {
				nh.gone(n.Name)
			}
		},
	}); err != nil {
		return nil, nil, err
	}
	pf := informers.NewSharedInformerFactoryWithOptions(k, 0, informers.WithNamespace("default"),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "app=" + autoscaleApp }))
	if _, err := pf.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { ph.seen(o.(*corev1.Pod), time.Now()) },
		UpdateFunc: func(_, o any) { ph.seen(o.(*corev1.Pod), time.Now()) },
	}); err != nil {
		return nil, nil, err
	}
	nf.Start(ctx.Done())
	pf.Start(ctx.Done())
	for _, f := range []informers.SharedInformerFactory{nf, pf} {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return nil, nil, fmt.Errorf("the informer of %v did not sync", typ)
			}
		}
	}
	return nh, ph, nil
}

type autoscaleRun struct {
	env     *benchEnv
	tenant  string
	dir     string
	k       kubernetes.Interface
	nodes   *nodeHistory
	pods    *podHistory
	timeout time.Duration
	caLog   string
}

func runBenchAutoscale(c *cli.Context) error {
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	tools := c.String("tools")
	tofu, mirror, caBin := c.String("tofu"), c.String("provider-mirror"), c.String("autoscaler")
	if tofu == "" {
		tofu = filepath.Join(tools, "bin", "tofu")
	}
	if mirror == "" {
		mirror = filepath.Join(tools, "mirror")
	}
	if caBin == "" {
		caBin = filepath.Join(tools, "autoscaler", autoscaleVersion, "cluster-autoscaler")
	}
	for _, p := range []string{tofu, mirror, caBin} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%w (build the tools with `go tool task tools`, or pass --tools)", err)
		}
	}
	dir := c.String("data-dir")
	if dir == "" {
		d, err := os.MkdirTemp("", "rezus-bench-autoscale-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	exe, err := serverBinary(c)
	if err != nil {
		return err
	}
	env, stop, err := startBenchServer(ctx, exe, filepath.Join(dir, "server"), "", "", "--with-emulator", "--tofu", tofu,
		"--provider-mirror", mirror, "--apply-debounce", c.Duration("apply-debounce").String(), "--resync", "0",
		"--emulator-kube", "on", "--kube-tools", tools, "--autoscaler-listen", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer stop()
	if err := env.waitFor(ctx, 60*time.Second, func() (bool, error) {
		code, _, err := env.request(ctx, http.MethodGet, "/api/v1/providers/emulated", "", "")
		return code == http.StatusOK, err
	}); err != nil {
		return fmt.Errorf("the emulated provider was not registered: %w", err)
	}
	cycles := c.Int("cycles")
	fmt.Printf("autoscale: tenant %s, group %s 1..2 (4-CPU emulated Nodes, 3-CPU pods), cluster-autoscaler %s --scan-interval %s --scale-down-unneeded-time %s, --apply-debounce %s, %d cycles, %d CPUs\n",
		autoscaleTenantName, autoscaleGroup, autoscaleVersion, c.Duration("scan-interval"), c.Duration("scale-down-unneeded-time"),
		c.Duration("apply-debounce"), cycles, runtime.NumCPU())

	r := &autoscaleRun{env: env, tenant: autoscaleTenantName, dir: dir, timeout: c.Duration("cycle-timeout")}
	start := time.Now()
	if err := r.build(ctx); err != nil {
		return err
	}
	fmt.Printf("  built: 2 machines reconciled, 2 Nodes Ready in %s\n", time.Since(start).Round(100*time.Millisecond))
	stopCA, err := r.startAutoscaler(ctx, caBin, c.Duration("scan-interval"), c.Duration("scale-down-unneeded-time"))
	if err != nil {
		return err
	}
	defer stopCA()

	var splits []autoscaleSplit
	for i := range cycles {
		cy, err := r.cycle(ctx)
		if err != nil {
			r.tailLog()
			return fmt.Errorf("cycle %d: %w", i+1, err)
		}
		s := cy.split()
		splits = append(splits, s)
		fmt.Printf("  cycle %d: pod → Node Ready %s (decision %s, queue %s, tofu %s, apply rest %s, boot %s); pod Running +%s; scale-down %s\n",
			i+1, secs(s.Total), secs(s.Decision), secs(s.Queue), secs(s.Tofu), secs(s.ApplyRest), secs(s.Boot), secs(s.Schedule), secs(s.Down))
	}
	fmt.Println()
	fmt.Print(autoscaleTable(splits))
	fmt.Println()
	return r.check(ctx)
}

// build makes the tenant and waits until it is reconciled with 2 machines
// and 2 Ready Nodes, then starts following its cluster and creates the
// Deployment with its one pod running.
func (r *autoscaleRun) build(ctx context.Context) error {
	env := r.env
	if err := env.expect(ctx, http.StatusCreated, "/api/v1/tenants", `{"metadata":{"name":"`+r.tenant+`"},"spec":{}}`); err != nil {
		return err
	}
	for _, g := range []string{
		`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"emulated"}}`,
		`{"metadata":{"name":"` + autoscaleGroup + `"},"spec":{"role":"worker","count":1,"provider":"emulated","labels":{"pool":"auto"},"autoscaling":{"minCount":1,"maxCount":2}}}`,
	} {
		if err := env.expect(ctx, http.StatusCreated, "/api/v1/tenants/"+r.tenant+"/nodegroups", g); err != nil {
			return err
		}
	}
	if err := env.waitFor(ctx, r.timeout, func() (bool, error) { return r.settled(ctx, 2) }); err != nil {
		return fmt.Errorf("building the tenant: %w", err)
	}
	code, kubeconfig, err := env.request(ctx, http.MethodGet, "/api/v1/tenants/"+r.tenant+"/kubeconfig/admin", "", "")
	if err != nil || code != http.StatusOK {
		return fmt.Errorf("the admin kubeconfig: %d %s %v", code, kubeconfig, err)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "kubeconfig"), kubeconfig, 0o600); err != nil {
		return err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return err
	}
	watcher, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cfg.Timeout = 10 * time.Second
	if r.k, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if err := env.waitFor(ctx, 3*time.Minute, func() (bool, error) {
		nodes, err := r.k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil // the API server may still be starting
		}
		ready := 0
		for i := range nodes.Items {
			if nodeReady(&nodes.Items[i]) {
				ready++
			}
		}
		return ready == 2 && len(nodes.Items) == 2, nil
	}); err != nil {
		return fmt.Errorf("2 Nodes Ready: %w", err)
	}
	if r.nodes, r.pods, err = watchKube(ctx, watcher); err != nil {
		return err
	}
	replicas, grace := int32(1), int64(1)
	labels := map[string]string{"app": autoscaleApp}
	if _, err := r.k.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: autoscaleApp},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, NodeSelector: map[string]string{"pool": "auto"},
					Containers: []corev1.Container{{Name: autoscaleApp, Image: "registry.example/" + autoscaleApp + ":1",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}}}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	return env.waitFor(ctx, 2*time.Minute, func() (bool, error) {
		_, _, _, _, ok := r.pods.newRunning(nil, nil)
		return ok, nil
	})
}

// settled: the tenant reconciled at its generation with machines Machines
// and no apply open.
func (r *autoscaleRun) settled(ctx context.Context, machines int) (bool, error) {
	code, b, err := r.env.request(ctx, http.MethodGet, "/api/v1/tenants/"+r.tenant, "", "")
	if err != nil || code != http.StatusOK {
		return false, err
	}
	var t domain.Tenant
	if err := json.Unmarshal(b, &t); err != nil {
		return false, err
	}
	reconciled := false
	for _, c := range t.Status.Conditions {
		reconciled = reconciled || c.Type == "Reconciled" && c.Status == "True"
	}
	if !reconciled || t.Status.ObservedGeneration != t.Metadata.Generation {
		return false, nil
	}
	ms, err := r.machines(ctx)
	if err != nil || len(ms) != machines {
		return false, err
	}
	applies, err := r.applies(ctx)
	if err != nil {
		return false, err
	}
	for _, a := range applies {
		if a.Status.EndTime == nil {
			return false, nil
		}
	}
	return true, nil
}

func (r *autoscaleRun) machines(ctx context.Context) ([]domain.Machine, error) {
	var l struct{ Items []domain.Machine }
	return l.Items, r.get(ctx, "/api/v1/tenants/"+r.tenant+"/machines", &l)
}

func (r *autoscaleRun) applies(ctx context.Context) ([]domain.Apply, error) {
	var l struct{ Items []domain.Apply }
	return l.Items, r.get(ctx, "/api/v1/tenants/"+r.tenant+"/applies", &l)
}

func (r *autoscaleRun) groups(ctx context.Context) ([]domain.NodeGroup, error) {
	var l struct{ Items []domain.NodeGroup }
	return l.Items, r.get(ctx, "/api/v1/tenants/"+r.tenant+"/nodegroups", &l)
}

func (r *autoscaleRun) get(ctx context.Context, path string, into any) error {
	code, b, err := r.env.request(ctx, http.MethodGet, path, "", "")
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", path, code, b)
	}
	return json.Unmarshal(b, into)
}

// startAutoscaler issues the tenant an autoscaler certificate, writes the
// files `rezusctl autoscaler config` writes and runs the cluster-autoscaler
// with the e2e test's flags; it waits until the autoscaler's main loop ran.
func (r *autoscaleRun) startAutoscaler(ctx context.Context, bin string, scan, unneeded time.Duration) (func(), error) {
	code, b, err := r.env.request(ctx, http.MethodPost, "/api/v1/tenants/"+r.tenant+"/autoscaler/certificates", "application/json", `{"validity":"24h"}`)
	if err != nil || code != http.StatusCreated {
		return nil, fmt.Errorf("issuing an autoscaler certificate: %d %s %v", code, b, err)
	}
	var creds struct{ Certificate, Key, CA, Endpoint string }
	if err := json.Unmarshal(b, &creds); err != nil {
		return nil, err
	}
	files := map[string]string{"tls.crt": creds.Certificate, "tls.key": creds.Key, "ca.crt": creds.CA,
		"cloud-config": fmt.Sprintf("address: %q\ncert: %q\nkey: %q\ncacert: %q\ngrpc_timeout: 10s\n", creds.Endpoint,
			filepath.Join(r.dir, "tls.crt"), filepath.Join(r.dir, "tls.key"), filepath.Join(r.dir, "ca.crt"))}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(r.dir, name), []byte(content), 0o600); err != nil {
			return nil, err
		}
	}
	addr, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	r.caLog = filepath.Join(r.dir, "cluster-autoscaler.log")
	logf, err := os.Create(r.caLog)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin,
		"--cloud-provider=externalgrpc", "--cloud-config="+filepath.Join(r.dir, "cloud-config"),
		"--kubeconfig="+filepath.Join(r.dir, "kubeconfig"), "--namespace=kube-system", "--leader-elect=false",
		"--address="+addr[0], "--scan-interval="+scan.String(), "--expander=random",
		"--scale-down-unneeded-time="+unneeded.String(), "--scale-down-delay-after-add=10s", "--scale-down-delay-after-delete=0s",
		"--scale-down-delay-after-failure=10s", "--max-node-provision-time=4m", "--new-pod-scale-up-delay=0s",
		"--skip-nodes-with-system-pods=false", "--skip-nodes-with-local-storage=false", "--max-graceful-termination-sec=5",
		// A node whose pods had nowhere to go (the gpu pod) is looked at
		// again after this, not the default 5 minutes.
		"--unremovable-node-recheck-timeout=10s",
		"--v=2")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	// Its main loop sets cluster_autoscaler_last_activity{activity="main"}.
	err = r.env.waitFor(ctx, 2*time.Minute, func() (bool, error) {
		select {
		case <-exited:
			return false, errors.New("the cluster-autoscaler exited")
		default:
		}
		resp, err := http.Get("http://" + addr[0] + "/metrics")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), `cluster_autoscaler_last_activity{activity="main"}`), nil
	})
	if err != nil {
		r.tailLog()
		stop()
		return nil, fmt.Errorf("the cluster-autoscaler's main loop: %w", err)
	}
	fmt.Printf("  cluster-autoscaler running (log %s)\n", r.caLog)
	return stop, nil
}

// tailLog prints the end of the autoscaler's log, for a failure.
func (r *autoscaleRun) tailLog() {
	if r.caLog == "" {
		return
	}
	f, err := os.Open(r.caLog)
	if err != nil {
		return
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 60 {
			lines = lines[1:]
		}
	}
	fmt.Fprintf(os.Stderr, "cluster-autoscaler log (tail):\n%s\n", strings.Join(lines, "\n"))
}

func (r *autoscaleRun) scale(ctx context.Context, replicas int) error {
	_, err := r.k.AppsV1().Deployments("default").Patch(ctx, autoscaleApp, types.MergePatchType,
		fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas), metav1.PatchOptions{})
	return err
}

func (r *autoscaleRun) groupEvents(ctx context.Context) ([]benchEvent, error) {
	return r.env.events(ctx, "kind=NodeGroup&tenant="+r.tenant+"&name="+autoscaleGroup)
}

// cycle scales the Deployment to 2 and back to 1 and records the times.
func (r *autoscaleRun) cycle(ctx context.Context) (autoscaleCycle, error) {
	var cy autoscaleCycle
	evs, err := r.groupEvents(ctx)
	if err != nil {
		return cy, err
	}
	var after uint64
	if len(evs) > 0 {
		after = evs[len(evs)-1].Seq
	}
	podsBefore, nodesBefore := r.pods.names(), r.nodes.names()
	if len(nodesBefore) != 2 {
		return cy, fmt.Errorf("the cycle starts with %d Nodes (%v), not 2", len(nodesBefore), nodesBefore)
	}
	if err := r.scale(ctx, 2); err != nil {
		return cy, err
	}
	var node string
	if err := r.env.waitFor(ctx, r.timeout, func() (bool, error) {
		var ok bool
		_, node, cy.PodCreated, cy.PodRunning, ok = r.pods.newRunning(podsBefore, nodesBefore)
		if ok {
			cy.NodeReady, ok = r.nodes.readyAt(node)
		}
		return ok, nil
	}); err != nil {
		return cy, fmt.Errorf("the new pod Running on a new Node: %w", err)
	}
	var up benchEvent
	if err := r.env.waitFor(ctx, 2*time.Minute, func() (bool, error) {
		evs, err := r.groupEvents(ctx)
		if err != nil {
			return false, err
		}
		var ok bool
		if up, ok = scaleEvent(evs, after, true); !ok {
			return false, nil
		}
		applies, err := r.applies(ctx)
		if err != nil {
			return false, err
		}
		a, ok := applyFor(applies, autoscaleGroup, up)
		if !ok || a.Status.EndTime == nil {
			return false, nil
		}
		if a.Status.Phase != domain.ApplySucceeded {
			return false, fmt.Errorf("apply %s: %s: %s", a.Metadata.Name, a.Status.Phase, a.Status.Error)
		}
		cy.Scaled, cy.ApplyStart, cy.ApplyEnd = up.Time, *a.Status.StartTime, *a.Status.EndTime
		cy.Tofu = time.Duration(a.Status.TofuMilliseconds) * time.Millisecond
		return true, nil
	}); err != nil {
		return cy, fmt.Errorf("the scale-up's event and apply: %w", err)
	}

	cy.DownStart = time.Now()
	if err := r.scale(ctx, 1); err != nil {
		return cy, err
	}
	if err := r.env.waitFor(ctx, r.timeout, func() (bool, error) {
		if cy.DownScaled.IsZero() {
			evs, err := r.groupEvents(ctx)
			if err != nil {
				return false, err
			}
			down, ok := scaleEvent(evs, up.Seq, false)
			if !ok {
				return false, nil
			}
			cy.DownScaled = down.Time
		}
		var g domain.NodeGroup
		if err := r.get(ctx, "/api/v1/tenants/"+r.tenant+"/nodegroups/"+autoscaleGroup, &g); err != nil || g.Spec.Count != 1 {
			return false, err
		}
		if len(r.nodes.names()) != 2 {
			return false, nil
		}
		return r.settled(ctx, 2)
	}); err != nil {
		return cy, fmt.Errorf("back to 1 machine and 2 Nodes: %w", err)
	}
	cy.DownDone = time.Now()
	return cy, nil
}

// check counts orphaned and resurrected machines and Nodes; either is a
// failure.
func (r *autoscaleRun) check(ctx context.Context) error {
	nodes, err := r.emulatorNodes(ctx)
	if err != nil {
		return err
	}
	machines, err := r.machines(ctx)
	if err != nil {
		return err
	}
	groups, err := r.groups(ctx)
	if err != nil {
		return err
	}
	unnamed, unkept := orphans(r.tenant, nodes, machines, groups)
	mevs, err := r.env.events(ctx, "kind=Machine&tenant="+r.tenant)
	if err != nil {
		return err
	}
	rebuilt, back := rebuiltMachines(mevs), r.nodes.resurrected()
	created := 0
	for _, ev := range mevs {
		if ev.Type == "MachineCreated" {
			created++
		}
	}
	counts, _ := r.groupEvents(ctx)
	var history []int
	for _, ev := range counts {
		history = append(history, ev.Object.Spec.Count)
	}
	fmt.Printf("orphaned machines: %d (emulator nodes no Machine names: %d %v; Machines no group keeps: %d %v)\n",
		len(unnamed)+len(unkept), len(unnamed), unnamed, len(unkept), unkept)
	fmt.Printf("resurrected: %d (machines built again after their MachineDeleted: %d %v; Nodes registered again after deletion: %d %v)\n",
		len(rebuilt)+len(back), len(rebuilt), rebuilt, len(back), back)
	fmt.Printf("machines created in all: %d; the group's count over its events: %v\n", created, slices.Compact(history))
	if n := len(unnamed) + len(unkept) + len(rebuilt) + len(back); n > 0 {
		return fmt.Errorf("%d orphaned or resurrected machines or Nodes", n)
	}
	return nil
}

// emulatorNodes lists the emulator's nodes through its API, with the
// token serve --with-emulator writes under the data dir.
func (r *autoscaleRun) emulatorNodes(ctx context.Context) ([]emulatorNode, error) {
	b, err := os.ReadFile(filepath.Join(r.dir, "server", "emulator", "api.env"))
	if err != nil {
		return nil, err
	}
	var endpoint, token string
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, "=")
		switch k {
		case "EMULATOR_ENDPOINT":
			endpoint = v
		case "EMULATOR_TOKEN":
			token = v
		}
	}
	if endpoint == "" || token == "" {
		return nil, fmt.Errorf("no endpoint or token in the emulator's api.env")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/v1/nodes", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/v1/nodes: %s", endpoint, resp.Status)
	}
	var l struct{ Items []emulatorNode }
	return l.Items, json.NewDecoder(resp.Body).Decode(&l)
}
