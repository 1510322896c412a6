package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
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
