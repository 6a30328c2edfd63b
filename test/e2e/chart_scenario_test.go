package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	"github.com/conveyor-dev/conveyor/test/fixtures"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// serviceAccountKubeconfig writes a kubeconfig that authenticates as the ServiceAccount with a
// fresh token, so a local process has exactly the chart's RBAC.
func serviceAccountKubeconfig(ctx context.Context, t *testing.T, ns, sa string) string {
	t.Helper()
	token, err := env.Kubectl(ctx, "create", "token", sa, "-n", ns, "--duration=2h")
	if err != nil {
		t.Fatalf("token for %s/%s: %v: %s", ns, sa, err, token)
	}
	cfg := env.RESTConfig()
	caData := cfg.CAData
	if len(caData) == 0 && cfg.CAFile != "" {
		var err error
		if caData, err = os.ReadFile(cfg.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: caData, InsecureSkipTLSVerify: cfg.Insecure}
	kc.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: strings.TrimSpace(token)}
	kc.Contexts["sa"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: sa}
	kc.CurrentContext = "sa"
	path := filepath.Join(t.TempDir(), sa+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// startProcess runs the binary bin until the test ends, with the environment environ (nil: this
// process's), its output in a log file that is printed if the test fails.
func startProcess(t *testing.T, bin string, environ []string, args ...string) *exec.Cmd {
	t.Helper()
	name := filepath.Base(bin)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing (make build builds ./bin): %v", bin, err)
	}
	logPath := filepath.Join(t.TempDir(), name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = environ
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logFile.Close()
		if t.Failed() {
			if data, err := os.ReadFile(logPath); err == nil {
				lines := strings.Split(string(data), "\n")
				t.Logf("last lines of %s:\n%s", name, strings.Join(lines[max(0, len(lines)-40):], "\n"))
			}
		}
	})
	return cmd
}

// replaceArgs drops the flags named in drop from args and appends add.
func replaceArgs(args []string, drop []string, add ...string) []string {
	out := slices.DeleteFunc(slices.Clone(args), func(a string) bool {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		return slices.Contains(drop, name)
	})
	return append(out, add...)
}

// TestChartScenario installs the chart of the source tree and runs the scenario with the
// operator and conveyor-scheduler of ./bin (see runChartScenario).
func TestChartScenario(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	runChartScenario(ctx, t, newHelm(t), chartScenario{chart: []string{chartDir()}, binDir: env.BinDir()})
}

// chartScenario is what runChartScenario installs and runs.
type chartScenario struct {
	// chart is the chart argument of helm install and upgrade, and its flags: the source tree's
	// chart, or a chart in a registry with --version.
	chart []string
	// set are values for helm install beyond the scenario's own.
	set []string
	// binDir holds the conveyor-operator and conveyor-scheduler to run.
	binDir string
	// installed, if set, runs once helm install has returned, with the release's namespace.
	installed func(ctx context.Context, t *testing.T, system string)
	// running, if set, runs while the scenario's pipelines are placed, with their namespace.
	running func(ctx context.Context, t *testing.T, work string)
}

// runChartScenario installs the chart and runs the operator and conveyor-scheduler as local
// processes authenticated with tokens of the chart's ServiceAccounts, with the chart's own
// arguments and scheduler configuration: the chart's RBAC is what is exercised. The custom metrics
// APIService reaches the local operator through an ExternalName Service to localhost. Then the
// original scenario with autoscaling, helm upgrade, and helm uninstall, which leaves only the
// retained PVCs of what Conveyor created.
func runChartScenario(ctx context.Context, t *testing.T, h *helmCLI, sc chartScenario) {
	t.Helper()
	customMetricsOnce.Lock() // one custom metrics APIService per cluster
	defer customMetricsOnce.Unlock()
	system := testenv.NewNamespace(t, env.Client(), "", testenv.DeleteAfterTest())
	work := testenv.NewNamespace(t, env.Client(), "", testenv.DeleteAfterTest())
	const release = "conveyor"
	c := env.Client()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	installed := false
	t.Cleanup(func() {
		if installed {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, _ = h.run(ctx, "uninstall", release, "--namespace", system, "--ignore-not-found", "--wait", "--timeout", "90s")
		}
	})
	installed = true
	install := slices.Concat([]string{"install", release}, sc.chart, []string{"--namespace", system, "--skip-crds", "--wait", "--timeout", "3m"},
		setFlags(append([]string{"customMetrics.service.externalName=localhost", fmt.Sprintf("customMetrics.service.port=%d", port),
			"operator.replicas=1", "scheduler.replicas=1"}, sc.set...)))
	if out, err := h.run(ctx, install...); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	if sc.installed != nil {
		sc.installed(ctx, t, system)
	}

	// The operator: the chart's arguments, its ServiceAccount, its serving certificate.
	secret := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: system, Name: release + "-operator-tls"}, secret); err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	// The metrics endpoint serves the chart's certificate from where the chart mounts it,
	// <TMPDIR>/k8s-metrics-server/serving-certs, with TMPDIR a directory of this test.
	tmpDir := t.TempDir()
	metricsCertDir := filepath.Join(tmpDir, "k8s-metrics-server", "serving-certs")
	if err := os.MkdirAll(metricsCertDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tls.crt", "tls.key"} {
		for _, dir := range []string{certDir, metricsCertDir} {
			if err := os.WriteFile(filepath.Join(dir, f), secret.Data[f], 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	metricsPort, schedulerPort := freePort(t), freePort(t)
	dep := &appsv1.Deployment{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: system, Name: release + "-operator"}, dep); err != nil {
		t.Fatal(err)
	}
	args := replaceArgs(dep.Spec.Template.Spec.Containers[0].Args,
		[]string{"metrics-bind-address", "health-probe-bind-address", "custom-metrics-port", "custom-metrics-cert-dir"},
		"--kubeconfig="+serviceAccountKubeconfig(ctx, t, system, dep.Spec.Template.Spec.ServiceAccountName),
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metricsPort), "--health-probe-bind-address=0",
		fmt.Sprintf("--custom-metrics-port=%d", port), "--custom-metrics-bind-address=127.0.0.1", "--custom-metrics-cert-dir="+certDir)
	startProcess(t, filepath.Join(sc.binDir, "conveyor-operator"), append(os.Environ(), "TMPDIR="+tmpDir), args...)

	// The scheduler: the chart's KubeSchedulerConfiguration, its ServiceAccount.
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: system, Name: release + "-scheduler-config"}, cm); err != nil {
		t.Fatal(err)
	}
	var schedConfig map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &schedConfig); err != nil {
		t.Fatal(err)
	}
	schedulerKubeconfig := serviceAccountKubeconfig(ctx, t, system, release+"-scheduler")
	schedConfig["clientConnection"].(map[string]any)["kubeconfig"] = schedulerKubeconfig
	rendered, err := yaml.Marshal(schedConfig)
	if err != nil {
		t.Fatal(err)
	}
	configPath := filepath.Join(t.TempDir(), "scheduler.yaml")
	if err := os.WriteFile(configPath, rendered, 0o600); err != nil {
		t.Fatal(err)
	}
	// Its secure port on a local port with the chart's certificate, authenticating and authorizing
	// its callers through the API server as its ServiceAccount, as in the cluster.
	startProcess(t, filepath.Join(sc.binDir, "conveyor-scheduler"), nil, "--config="+configPath, "--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", schedulerPort),
		"--tls-cert-file="+filepath.Join(certDir, "tls.crt"), "--tls-private-key-file="+filepath.Join(certDir, "tls.key"),
		"--authentication-kubeconfig="+schedulerKubeconfig, "--authorization-kubeconfig="+schedulerKubeconfig)

	if err := env.WaitAPIServiceAvailable(ctx, "v1beta2.custom.metrics.k8s.io", 3*time.Minute); err != nil {
		t.Fatalf("the chart's custom metrics APIService is not Available with the local operator behind it: %v", err)
	}

	// The original scenario, in a namespace of its own, with autoscaling.
	// A set with a claim, retained when the set is deleted (the default), to see what uninstall leaves.
	poolClass := work + "-pool"
	createVolumePool(ctx, t, poolClass, 1)
	store := fixtures.MakeWorkerSet(work, "store").Replicas(1).VolumeClaim("data", poolClass, "1Gi").Obj()
	for _, o := range append(scenario(work, true).Objects(), store) {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("create %s: %v", o.GetName(), err)
		}
	}
	waitScaledUp(ctx, t, work)
	checkMonitoredMetricsServed(ctx, t, h, system, work, metricsPort, schedulerPort, secret.Data["ca.crt"])
	// conveyor-scheduler placed the worker Pods: its Scheduled Events name it.
	testenv.EventuallyContext(ctx, t, "Scheduled events from conveyor-scheduler", func(ctx context.Context) error {
		events := &corev1.EventList{}
		if err := c.List(ctx, events, client.InNamespace(work)); err != nil {
			return err
		}
		n := 0
		for _, e := range events.Items {
			if e.Reason == "Scheduled" && e.ReportingController == schedulingv1alpha1.SchedulerName {
				n++
			}
		}
		if n < 5 {
			return fmt.Errorf("%d Scheduled events by %s", n, schedulingv1alpha1.SchedulerName)
		}
		return nil
	})

	if sc.running != nil {
		sc.running(ctx, t, work)
	}

	loadDrops(ctx, t, work)

	upgrade := slices.Concat([]string{"upgrade", release}, sc.chart, []string{"--namespace", system, "--reuse-values", "--set", "operator.logLevel=2", "--wait", "--timeout", "3m"})
	if out, err := h.run(ctx, upgrade...); err != nil {
		t.Fatalf("helm upgrade: %v\n%s", err, out)
	}

	// Delete what users created, with the operator still running, then uninstall: of everything
	// Conveyor created, only the retained claim is left.
	for _, obj := range []client.Object{&schedulingv1alpha1.Pipeline{}, &schedulingv1alpha1.WorkerClass{}, &appsv1alpha1.WorkerSet{}} {
		if err := c.DeleteAllOf(ctx, obj, client.InNamespace(work)); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := h.run(ctx, "uninstall", release, "--namespace", system, "--wait", "--timeout", "2m"); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	installed = false
	testenv.EventuallyContext(ctx, t, "only the retained claim is left", func(ctx context.Context) error {
		var left []string
		for _, l := range []client.ObjectList{&corev1.PodList{}, &corev1.ServiceList{}, &corev1.ConfigMapList{}, &schedulingv1alpha1.PipelineBindingList{}} {
			if err := c.List(ctx, l, client.InNamespace(work)); err != nil {
				return err
			}
			items, err := meta.ExtractList(l)
			if err != nil {
				return err
			}
			for _, item := range items {
				o, err := meta.Accessor(item)
				if err != nil {
					return err
				}
				if o.GetName() != "kube-root-ca.crt" {
					left = append(left, fmt.Sprintf("%T %s", item, o.GetName()))
				}
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("left: %v", left)
		}
		return nil
	})
	if got := claimNames(ctx, t, work); !slices.Equal(got, []string{"data-store-0"}) {
		t.Errorf("claims after uninstall: %v, want the retained data-store-0", got)
	}
}

func pipelinePhases(ctx context.Context, ns string) (map[string]schedulingv1alpha1.PipelinePhase, error) {
	list := &schedulingv1alpha1.PipelineList{}
	if err := env.Client().List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	out := map[string]schedulingv1alpha1.PipelinePhase{}
	for _, p := range list.Items {
		out[p.Name] = p.Status.Phase
	}
	return out, nil
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// checkMonitoredMetricsServed scrapes the operator's and the scheduler's /metrics as Prometheus
// would, with the token of a ServiceAccount bound to the chart's <fullname>-metrics-reader, over
// TLS verified with the chart's CA for the names of their metrics Services, and checks that every
// metric the chart's dashboard and alerts query is served, leader_election_master_status by both. A Pipeline whose stage exceeds a green worker is there meanwhile, so that
// conveyor_pipelines_unschedulable has a series.
func checkMonitoredMetricsServed(ctx context.Context, t *testing.T, h *helmCLI, system, work string, operatorPort, schedulerPort int, ca []byte) {
	t.Helper()
	c := env.Client()
	oversized := fixtures.MakePipeline(work, "oversized").Load(fixtures.ScenarioCapacity["green"] + 5).Chain("green").Obj()
	if err := c.Create(ctx, oversized); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Delete(ctx, oversized); err != nil {
			t.Errorf("delete %s: %v", oversized.Name, err)
		}
	}()
	if out, err := env.Kubectl(ctx, "create", "serviceaccount", "metrics-check", "-n", system); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	binding := "metrics-check-" + system
	if out, err := env.Kubectl(ctx, "create", "clusterrolebinding", binding, "--clusterrole=conveyor-metrics-reader", "--serviceaccount="+system+":metrics-check"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() {
		_, _ = env.Kubectl(context.Background(), "delete", "clusterrolebinding", binding, "--ignore-not-found")
	})
	token, err := env.Kubectl(ctx, "create", "token", "metrics-check", "-n", system)
	if err != nil {
		t.Fatalf("%v: %s", err, token)
	}
	token = strings.TrimSpace(token)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		t.Fatal("the chart's ca.crt holds no certificate")
	}
	operatorTLS := &tls.Config{RootCAs: roots, ServerName: "conveyor-operator-metrics." + system + ".svc", MinVersion: tls.VersionTLS12}
	schedulerTLS := &tls.Config{RootCAs: roots, ServerName: "conveyor-scheduler-metrics." + system + ".svc", MinVersion: tls.VersionTLS12}

	wanted := monitoredMetricNames(ctx, t, h, system)
	testenv.EventuallyContext(ctx, t, "the operator and the scheduler serve every metric of the dashboard and the alerts", func(ctx context.Context) error {
		operator, err := scrapeMetricNames(ctx, fmt.Sprintf("https://127.0.0.1:%d/metrics", operatorPort), token, operatorTLS)
		if err != nil {
			return fmt.Errorf("operator: %w", err)
		}
		scheduler, err := scrapeMetricNames(ctx, fmt.Sprintf("https://127.0.0.1:%d/metrics", schedulerPort), token, schedulerTLS)
		if err != nil {
			return fmt.Errorf("scheduler: %w", err)
		}
		var missing []string
		for _, name := range wanted {
			if !operator[name] && !scheduler[name] {
				missing = append(missing, name)
			}
		}
		for what, served := range map[string]map[string]bool{"operator": operator, "scheduler": scheduler} {
			if !served["leader_election_master_status"] {
				missing = append(missing, "leader_election_master_status of the "+what)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("not served: %v", missing)
		}
		t.Logf("the operator and the scheduler serve all %d metrics the dashboard and the alerts query: %v", len(wanted), wanted)
		return nil
	})
	// Unauthenticated, both refuse.
	for name, url := range map[string]string{"operator": fmt.Sprintf("https://127.0.0.1:%d/metrics", operatorPort), "scheduler": fmt.Sprintf("https://127.0.0.1:%d/metrics", schedulerPort)} {
		tlsConfig := operatorTLS
		if name == "scheduler" {
			tlsConfig = schedulerTLS
		}
		if _, err := scrapeMetricNames(ctx, url, "not-a-token", tlsConfig); err == nil {
			t.Errorf("the %s serves /metrics to a caller with an invalid token", name)
		}
	}
}
