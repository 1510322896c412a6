package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/rezuscloud/rezuscloud/domain"
)

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
