package e2e

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	scheduleroptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	schedulerconfigvalidation "k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
	schedconfig "github.com/conveyor-dev/conveyor/pkg/schedplugin/apis/config"
	_ "github.com/conveyor-dev/conveyor/pkg/schedplugin/apis/config/v1" // WorkerClassCapacityArgs in the scheduler's scheme
	"github.com/conveyor-dev/conveyor/test/cluster"
	"github.com/conveyor-dev/conveyor/test/testenv"
)

// The chart's tests: helm lint, helm template checked object by object and accepted by a
// server-side dry run, and helm install / upgrade / uninstall on the local cluster. No operator or
// scheduler runs here: on kwok nodes the chart's Pods are only simulated.

const (
	// customMetricsAPIService is the one APIService the chart registers.
	customMetricsAPIService = "v1beta2.custom.metrics.k8s.io"
	// chartTestTimeout bounds install, upgrade and uninstall with their waits.
	chartTestTimeout = 8 * time.Minute
)

// TestChartLint: helm lint --strict finds nothing with the default values or the optional parts
// switched, and the values schema rejects what it should.
func TestChartLint(t *testing.T) {
	ctx := testContext(t)
	h := newHelm(t)
	for _, tc := range []struct {
		name string
		set  []string
	}{
		{"defaults", nil},
		{"customMetrics off, serviceMonitor on", []string{"customMetrics.enabled=false", "metrics.serviceMonitor.enabled=true"}},
		{"one replica each, no PDBs", []string{"operator.replicas=1", "scheduler.replicas=1"}},
		{"dashboard and alerts on", []string{"monitoring.dashboard.enabled=true", "monitoring.prometheusRule.enabled=true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := h.run(ctx, append([]string{"lint", "--strict", chartDir()}, setFlags(tc.set)...)...)
			if err != nil {
				t.Fatalf("helm lint: %v\n%s", err, out)
			}
			if strings.Contains(out, "[WARNING]") || strings.Contains(out, "[ERROR]") || !strings.Contains(out, "0 chart(s) failed") {
				t.Errorf("helm lint is not clean:\n%s", out)
			}
		})
	}

	for _, tc := range []struct {
		set, want string
	}{
		{"scheduler.plugin.scoringStrategy=Random", "scoringStrategy"},
		{"operator.replicas=0", "replicas"},
		{"noSuchValue=1", "noSuchValue"},
		{"image.pullPolicy=Sometimes", "pullPolicy"},
		{"monitoring.dashboard.namespace=Not_A_Namespace", "namespace"},
	} {
		t.Run("schema rejects "+tc.set, func(t *testing.T) {
			out, err := h.run(ctx, "template", "conveyor", chartDir(), "--set", tc.set)
			if err == nil {
				t.Fatalf("helm template --set %s succeeded, want the values schema to reject it", tc.set)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q (output %q)", err, tc.want, out)
			}
		})
	}
}

// TestChartValuesDocumented: docs/install.md's table of values names every value of values.yaml
// (a value, or a parent of it documented as a whole, such as resources), and nothing else.
func TestChartValuesDocumented(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir(), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]any{}
	if err := sigsyaml.Unmarshal(data, &values); err != nil {
		t.Fatalf("parsing values.yaml: %v", err)
	}
	doc, err := os.ReadFile(filepath.Join(env.RepoRoot(), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if rest, ok := strings.CutPrefix(line, "| `"); ok {
			if key, _, ok := strings.Cut(rest, "`"); ok && key != "" {
				documented[key] = true
			}
		}
	}
	var leaves []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		m, ok := v.(map[string]any)
		if !ok || len(m) == 0 || documented[prefix] {
			leaves = append(leaves, prefix)
			return
		}
		for k, child := range m {
			path := k
			if prefix != "" {
				path = prefix + "." + k
			}
			walk(path, child)
		}
	}
	walk("", values)
	sort.Strings(leaves)
	for _, leaf := range leaves {
		if !documented[leaf] {
			t.Errorf("value %s is not in the table of docs/install.md", leaf)
		}
		delete(documented, leaf)
	}
	for key := range documented {
		t.Errorf("docs/install.md documents %s, which is not a value of values.yaml (or whose parent it documents too)", key)
	}
}

// TestChartTemplate renders the chart with several sets of values, checks the objects a user and the
// design depend on, and has the local cluster's API server accept every one in a server-side dry run.
func TestChartTemplate(t *testing.T) {
	ctx := testContext(t)
	h := newHelm(t)
	ns := testenv.NewNamespace(t, env.Client(), "", testenv.DeleteAfterTest())
	const release = "conveyor"

	t.Run("defaults", func(t *testing.T) {
		objs := renderChart(ctx, t, h, release, ns)
		checkChartObjects(t, objs, release, ns)
		if args := containerArgs(t, objs, "conveyor-operator"); !slices.Contains(args, "--sharding") {
			t.Errorf("operator args %q: the default is sharded replicas, --sharding is missing", args)
		}
		checkCustomMetrics(t, objs, release, ns, true)
		if o := findObject(objs, "ServiceMonitor", ""); o != nil {
			t.Errorf("a ServiceMonitor is rendered by default")
		}
		serverDryRun(ctx, t, objs)
	})

	t.Run("sharding disabled", func(t *testing.T) {
		objs := renderChart(ctx, t, h, release, ns, "operator.sharding=false")
		checkChartObjects(t, objs, release, ns)
		if args := containerArgs(t, objs, "conveyor-operator"); !slices.Contains(args, "--leader-elect") {
			t.Errorf("operator args %q: without sharding a leader is elected, --leader-elect is missing", args)
		}
		serverDryRun(ctx, t, objs)
	})

	t.Run("customMetrics disabled", func(t *testing.T) {
		objs := renderChart(ctx, t, h, release, ns, "customMetrics.enabled=false")
		checkChartObjects(t, objs, release, ns)
		checkCustomMetrics(t, objs, release, ns, false)
		serverDryRun(ctx, t, objs)
	})

	t.Run("serviceMonitor enabled", func(t *testing.T) {
		objs := renderChart(ctx, t, h, release, ns, "metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.interval=30s")
		checkChartObjects(t, objs, release, ns)
		checkServiceMonitor(t, objs, ns)
		// The monitoring.coreos.com CRDs are not installed in the local cluster.
		serverDryRun(ctx, t, slices.DeleteFunc(slices.Clone(objs), func(o *unstructured.Unstructured) bool { return o.GetKind() == "ServiceMonitor" }))
	})

	t.Run("custom metrics served from outside the cluster", func(t *testing.T) {
		objs := renderChart(ctx, t, h, release, ns, "customMetrics.service.externalName=localhost", "customMetrics.service.port=16443")
		checkChartObjects(t, objs, release, ns)
		checkCustomMetrics(t, objs, release, ns, true)
		svc := &corev1.Service{}
		fromUnstructured(t, findObject(objs, "Service", "conveyor-custom-metrics"), svc)
		if svc.Spec.Type != corev1.ServiceTypeExternalName || svc.Spec.ExternalName != "localhost" || len(svc.Spec.Selector) != 0 {
			t.Errorf("Service %s: type %s, externalName %q, selector %v; want an ExternalName Service to localhost without a selector",
				svc.Name, svc.Spec.Type, svc.Spec.ExternalName, svc.Spec.Selector)
		}
		serverDryRun(ctx, t, objs)
	})

	// The watched namespaces must exist for the dry run to accept the operator's Roles in them.
	watchA := testenv.NewNamespace(t, env.Client(), "watch-a", testenv.DeleteAfterTest())
	watchB := testenv.NewNamespace(t, env.Client(), "watch-b", testenv.DeleteAfterTest())
	t.Run("other release name, one replica each", func(t *testing.T) {
		objs := renderChart(ctx, t, h, "docs", ns, "operator.replicas=1", "scheduler.replicas=1", "scheduler.plugin.scoringStrategy=Pack",
			"scheduler.plugin.defaultNodeCapacity=120", "scheduler.plugin.enforceNodeCapacity=true", "operator.watchNamespaces={"+watchA+","+watchB+"}")
		checkChartObjects(t, objs, "docs", ns)
		if n := countKind(objs, "PodDisruptionBudget"); n != 0 {
			t.Errorf("%d PodDisruptionBudgets with one replica each, want none", n)
		}
		checkSchedulerConfig(t, objs, "docs", ns, schedconfig.WorkerClassCapacityArgs{ScoringStrategy: schedconfig.Pack, DefaultNodeCapacity: 120, EnforceNodeCapacity: true})
		if args := containerArgs(t, objs, "docs-conveyor-operator"); !slices.Contains(args, "--namespaces="+watchA+","+watchB) || !slices.Contains(args, "--leader-elect") {
			t.Errorf("operator args %q lack --namespaces=%s,%s or --leader-elect (sharding applies to every namespace only)", args, watchA, watchB)
		}
		if got := watchedNamespaces(objs, "docs-conveyor"); !slices.Equal(got, []string{watchA, watchB}) {
			t.Errorf("the operator's ClusterRole records the watched namespaces %q, want %q", got, []string{watchA, watchB})
		}
		serverDryRun(ctx, t, objs)
	})
}

// TestChartInstall installs the chart into the local cluster, in a namespace that enforces the
// restricted Pod Security Standard, upgrades it, and uninstalls it: afterwards nothing of the
// release is left but the CRDs.
func TestChartInstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), chartTestTimeout)
	defer cancel()
	h := newHelm(t)
	ns := testenv.NewNamespace(t, env.Client(), "", testenv.DeleteAfterTest())
	const release = "conveyor-e2e"
	selector := "app.kubernetes.io/instance=" + release + ",app.kubernetes.io/name=conveyor"

	// Pods that do not meet the restricted profile are rejected here, so the Deployments could not
	// become available.
	patch := []byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"restricted","pod-security.kubernetes.io/enforce-version":"latest"}}}`)
	if err := env.Client().Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("labelling namespace %s: %v", ns, err)
	}

	// The namespace really enforces it: a Pod without the restricted settings is refused.
	plain := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unrestricted"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/none:v1"}}},
	}
	if err := env.Client().Create(ctx, plain, client.DryRunAll); !apierrors.IsForbidden(err) {
		t.Fatalf("dry-run creating a Pod without securityContext in %s: %v, want Forbidden by Pod Security admission", ns, err)
	}

	// An APIService left behind would break discovery for every later test of the package.
	installed := false
	t.Cleanup(func() {
		if !installed {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if out, err := h.run(ctx, "uninstall", release, "--namespace", ns, "--ignore-not-found", "--wait", "--timeout", "90s"); err != nil {
			t.Errorf("cleaning up release %s: %v\n%s", release, err, out)
		}
	})

	// --skip-crds: TestMain installed the CRDs for the whole package, and Helm v4 server-side applies
	// crds/ even over existing CRDs, which conflicts with the harness's field manager as soon as the
	// generated files differ from what TestMain installed. The dry runs above cover crds/.
	installed = true
	if out, err := h.run(ctx, "install", release, chartDir(), "--namespace", ns, "--skip-crds", "--wait", "--timeout", "3m"); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	fullname := release // the release name contains the chart name
	for _, name := range []string{fullname + "-operator", fullname + "-scheduler"} {
		waitDeploymentAvailable(ctx, t, ns, name, 2)
	}
	secret := &corev1.Secret{}
	if err := env.Client().Get(ctx, client.ObjectKey{Namespace: ns, Name: fullname + "-operator-tls"}, secret); err != nil {
		t.Fatalf("reading the TLS Secret: %v", err)
	}
	caBundle := apiServiceCABundle(ctx, t)
	if !bytes.Equal(caBundle, secret.Data["ca.crt"]) {
		t.Errorf("the APIService's caBundle is not the Secret's ca.crt")
	}

	before := labelledObjects(ctx, t, selector)
	for _, want := range []string{
		"Deployment " + ns + "/" + fullname + "-operator",
		"Deployment " + ns + "/" + fullname + "-scheduler",
		"APIService " + customMetricsAPIService,
		"ClusterRole " + fullname + "-operator",
		"RoleBinding kube-system/" + fullname + "-auth-reader",
		"Secret " + ns + "/" + fullname + "-operator-tls",
	} {
		if !slices.Contains(before, want) {
			t.Errorf("after install, %s is not among the objects labelled %s: %q", want, selector, before)
		}
	}

	// An upgrade keeps the generated certificate (the chart looks the Secret up) and so the
	// APIService's caBundle.
	if out, err := h.run(ctx, "upgrade", release, chartDir(), "--namespace", ns, "--reuse-values", "--set", "operator.logLevel=2", "--wait", "--timeout", "3m"); err != nil {
		t.Fatalf("helm upgrade: %v\n%s", err, out)
	}
	upgraded := &corev1.Secret{}
	if err := env.Client().Get(ctx, client.ObjectKeyFromObject(secret), upgraded); err != nil {
		t.Fatalf("reading the TLS Secret after the upgrade: %v", err)
	}
	if !reflect.DeepEqual(upgraded.Data, secret.Data) {
		t.Errorf("helm upgrade regenerated the TLS Secret; it must reuse the one in the cluster")
	}
	if !bytes.Equal(apiServiceCABundle(ctx, t), caBundle) {
		t.Errorf("helm upgrade changed the APIService's caBundle")
	}
	operator := &appsv1.Deployment{}
	if err := env.Client().Get(ctx, client.ObjectKey{Namespace: ns, Name: fullname + "-operator"}, operator); err != nil {
		t.Fatalf("reading the operator Deployment: %v", err)
	}
	if args := operator.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--v=2") {
		t.Errorf("after the upgrade the operator's args are %q, want --v=2 among them", args)
	}
	waitDeploymentAvailable(ctx, t, ns, fullname+"-operator", 2)

	if out, err := h.run(ctx, "uninstall", release, "--namespace", ns, "--wait", "--timeout", "2m"); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	installed = false

	// Garbage collection removes the ReplicaSets and Pods after their Deployments.
	err := cluster.Poll(ctx, 2*time.Minute, time.Second, func(ctx context.Context) (bool, error) {
		left := labelledObjects(ctx, t, selector)
		if len(left) > 0 {
			return false, fmt.Errorf("still there after helm uninstall: %q", left)
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The CRDs stay (Helm never deletes CRDs, not even those it installed from crds/).
	for _, c := range crds {
		if err := env.Client().Get(ctx, client.ObjectKey{Name: c.name}, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		}}); err != nil {
			t.Errorf("CRD %s after helm uninstall: %v", c.name, err)
		}
	}
}

// helmCLI runs the ./bin helm with a private configuration, cache and data directory, against the
// local cluster.
type helmCLI struct {
	bin string
	env []string
}

// newHelm returns the helm of the cluster's binary directory; the test is skipped without it,
// unless CI=true.
func newHelm(t *testing.T) *helmCLI {
	t.Helper()
	bin := filepath.Join(env.BinDir(), "helm")
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("helm is missing from %s: %v", env.BinDir(), err)
		}
		t.Skipf("helm is missing from %s (make tools builds it): %v", env.BinDir(), err)
	}
	home := t.TempDir()
	var environ []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "HELM_") || k == "KUBECONFIG" {
			continue
		}
		environ = append(environ, kv)
	}
	environ = append(environ,
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+env.Kubeconfig(),
	)
	return &helmCLI{bin: bin, env: environ}
}

// run runs helm and returns its standard output; an error carries its standard error.
func (h *helmCLI) run(ctx context.Context, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, h.bin, args...)
	cmd.Env = h.env
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// chartDir is the chart in the repository.
func chartDir() string { return filepath.Join(env.RepoRoot(), "charts", "conveyor") }

func setFlags(set []string) []string {
	var flags []string
	for _, s := range set {
		flags = append(flags, "--set", s)
	}
	return flags
}

// renderChart runs helm template on the source tree's chart, CRDs included, and parses every object.
func renderChart(ctx context.Context, t *testing.T, h *helmCLI, release, ns string, set ...string) []*unstructured.Unstructured {
	t.Helper()
	return renderChartFrom(ctx, t, h, []string{chartDir()}, release, ns, set...)
}

// renderChartFrom is renderChart of chart, helm's chart argument and its flags.
func renderChartFrom(ctx context.Context, t *testing.T, h *helmCLI, chart []string, release, ns string, set ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := h.run(ctx, slices.Concat([]string{"template", release}, chart, []string{"--namespace", ns, "--include-crds"}, setFlags(set))...)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	objs, err := parseManifests(out)
	if err != nil {
		t.Fatalf("parsing the output of helm template: %v", err)
	}
	return objs
}

// parseManifests splits a multi-document YAML stream into objects, skipping empty documents.
func parseManifests(data string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		data, err := sigsyaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%w in:\n%s", err, doc)
		}
		if s := strings.TrimSpace(string(data)); s == "null" || s == "{}" || s == "" {
			continue // a document of comments only
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(data); err != nil { // integers as int64, as the converter wants them
			return nil, fmt.Errorf("%w in:\n%s", err, doc)
		}
		objs = append(objs, obj)
	}
}

// serverDryRun has the API server validate and admit every object, without persisting anything.
func serverDryRun(ctx context.Context, t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	var buf bytes.Buffer
	for _, o := range objs {
		data, err := sigsyaml.Marshal(o.Object)
		if err != nil {
			t.Fatalf("encoding %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		buf.WriteString("---\n")
		buf.Write(data)
	}
	// Not under t.TempDir(): kubectl splits --filename at commas, which subtest names may hold.
	dir, err := os.MkdirTemp("", "conveyor-chart-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	file := filepath.Join(dir, "rendered.yaml")
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := env.Kubectl(ctx, "apply", "--server-side", "--dry-run=server", "--force-conflicts",
		"--field-manager=conveyor-chart-test", "--filename", file)
	if err != nil {
		t.Fatalf("server-side dry run: %v\n%s", err, out)
	}
	if n := strings.Count(out, "(server dry run)"); n != len(objs) {
		t.Errorf("the dry run applied %d objects, want %d:\n%s", n, len(objs), out)
	}
}

// clusterScoped are the kinds the chart renders without a namespace.
var clusterScoped = map[string]bool{
	"ClusterRole": true, "ClusterRoleBinding": true, "APIService": true, "CustomResourceDefinition": true,
}

// checkChartObjects checks what holds for every set of values: names, namespaces and labels, the
// CRDs, RBAC without wildcards and the operator's generated rules, the two Deployments with the
// restricted Pod Security profile, the scheduler's configuration, and the serving certificate.
func checkChartObjects(t *testing.T, objs []*unstructured.Unstructured, release, ns string) {
	t.Helper()
	fullname := release
	if !strings.Contains(release, "conveyor") {
		fullname = release + "-conveyor"
	}
	for _, o := range objs {
		what := o.GetKind() + " " + o.GetName()
		if len(o.GetName()) > 63 {
			t.Errorf("%s: name longer than 63 characters", what)
		}
		switch {
		case clusterScoped[o.GetKind()]:
			if o.GetNamespace() != "" {
				t.Errorf("%s: cluster-scoped, but has namespace %q", what, o.GetNamespace())
			}
		case o.GetKind() == "RoleBinding" && o.GetName() == fullname+"-auth-reader":
			expect(t, what+" namespace", o.GetNamespace(), "kube-system")
		case (o.GetKind() == "Role" || o.GetKind() == "RoleBinding") && o.GetName() == fullname+"-operator":
			// The operator's rules in each watched namespace.
			if watched := watchedNamespaces(objs, fullname); !slices.Contains(watched, o.GetNamespace()) {
				t.Errorf("%s: in namespace %q, which the operator does not watch (%q)", what, o.GetNamespace(), watched)
			}
		default:
			expect(t, what+" namespace", o.GetNamespace(), ns)
		}
		if o.GetKind() == "CustomResourceDefinition" {
			continue // generated into crds/, not templated
		}
		labels := o.GetLabels()
		expect(t, what+" label instance", labels["app.kubernetes.io/instance"], release)
		expect(t, what+" label name", labels["app.kubernetes.io/name"], "conveyor")
		expect(t, what+" label managed-by", labels["app.kubernetes.io/managed-by"], "Helm")
	}
	if n := countKind(objs, "CustomResourceDefinition"); n != len(crds) {
		t.Errorf("%d CRDs rendered, want %d", n, len(crds))
	}

	checkRBAC(t, objs, fullname, ns)
	for _, component := range []string{"operator", "scheduler"} {
		checkDeployment(t, objs, fullname+"-"+component, ns)
	}
	args := containerArgs(t, objs, fullname+"-operator")
	for _, want := range []string{
		"--leader-election-id=conveyor-operator.conveyor.dev", "--leader-election-namespace=" + ns,
		"--metrics-bind-address=:8443", "--health-probe-bind-address=:8081",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("operator args %q lack %s", args, want)
		}
	}
	// Either sharded replicas (every namespace watched; a grace period for the handover) or an
	// elected leader, never both.
	sharded, elected := slices.Contains(args, "--sharding"), slices.Contains(args, "--leader-elect")
	if sharded == elected {
		t.Errorf("operator args %q: want exactly one of --sharding and --leader-elect", args)
	}
	if sharded {
		if watched := watchedNamespaces(objs, fullname); len(watched) > 0 {
			t.Errorf("operator args %q: --sharding with watched namespaces %q", args, watched)
		}
		if d := deployment(t, objs, fullname+"-operator"); d != nil {
			if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g != 75 {
				t.Errorf("sharded operator: terminationGracePeriodSeconds %v, want 75 (a leave takes up to 60 s)", g)
			}
		}
	}
	if d := deployment(t, objs, fullname+"-scheduler"); d != nil {
		cmd := d.Spec.Template.Spec.Containers[0].Command
		if want := []string{"conveyor-scheduler", "--config", "/etc/conveyor-scheduler/config.yaml"}; !slices.Equal(cmd, want) {
			t.Errorf("scheduler command = %q, want %q", cmd, want)
		}
	}
	if release == "conveyor" {
		checkSchedulerConfig(t, objs, release, ns, schedconfig.WorkerClassCapacityArgs{ScoringStrategy: schedconfig.Spread})
	}
	for _, o := range objs {
		if o.GetKind() != "PodDisruptionBudget" {
			continue
		}
		pdb := &policyv1.PodDisruptionBudget{}
		fromUnstructured(t, o, pdb)
		if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
			t.Errorf("PodDisruptionBudget %s: minAvailable %v, want 1", pdb.Name, pdb.Spec.MinAvailable)
		}
	}
	checkServingCertificate(t, objs, fullname, ns)
}

// checkRBAC: no rule of any Role or ClusterRole uses a wildcard; the operator's ClusterRole holds
// exactly the rules generated from the code's markers; every binding binds a ServiceAccount the
// chart renders (or the HPA controller's).
func checkRBAC(t *testing.T, objs []*unstructured.Unstructured, fullname, ns string) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
			continue
		}
		role := &rbacv1.ClusterRole{}
		fromUnstructured(t, o, role)
		for i, r := range role.Rules {
			for _, list := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.ResourceNames, r.NonResourceURLs} {
				for _, v := range list {
					if strings.Contains(v, "*") {
						t.Errorf("%s %s rule %d has the wildcard %q", o.GetKind(), o.GetName(), i, v)
					}
				}
			}
		}
	}

	generated, err := os.ReadFile(filepath.Join(chartDir(), "files", "rbac", "role.yaml"))
	if err != nil {
		t.Fatalf("reading the generated RBAC: %v", err)
	}
	want := &rbacv1.ClusterRole{}
	if err := sigsyaml.Unmarshal(generated, want); err != nil {
		t.Fatalf("parsing files/rbac/role.yaml: %v", err)
	}
	if len(want.Rules) == 0 {
		t.Fatalf("files/rbac/role.yaml has no rules")
	}
	// The generated Lease rule (the sharding protocol's Leases) goes into the election Role of the
	// release namespace, never into the ClusterRole: the replicas' Leases live there alone.
	isLeaseRule := func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.APIGroups, "coordination.k8s.io") && slices.Contains(r.Resources, "leases")
	}
	var leaseRules []rbacv1.PolicyRule
	for _, r := range want.Rules {
		if isLeaseRule(r) {
			leaseRules = append(leaseRules, r)
		}
	}
	want.Rules = slices.DeleteFunc(want.Rules, isLeaseRule)
	if e := findNamespacedObject(objs, "Role", ns, fullname+"-operator-election"); e == nil {
		t.Errorf("no Role %s-operator-election in %s", fullname, ns)
	} else {
		election := &rbacv1.Role{}
		fromUnstructured(t, e, election)
		has := grants(election.Rules)
		for g := range grants(leaseRules) {
			if !has[g] {
				t.Errorf("Role %s/%s lacks %s, which the generated Lease rule grants", ns, e.GetName(), g)
			}
		}
	}
	if o := findObject(objs, "ClusterRole", fullname+"-operator"); o == nil {
		t.Errorf("no ClusterRole %s-operator", fullname)
	} else if watched := watchedNamespaces(objs, fullname); len(watched) == 0 {
		// Every namespace: the generated rules, as they are, in the ClusterRole; no Role.
		got := &rbacv1.ClusterRole{}
		fromUnstructured(t, o, got)
		if !reflect.DeepEqual(got.Rules, want.Rules) {
			t.Errorf("ClusterRole %s rules differ from files/rbac/role.yaml:\n got %+v\nwant %+v", o.GetName(), got.Rules, want.Rules)
		}
		if r := findObject(objs, "Role", fullname+"-operator"); r != nil {
			t.Errorf("a Role %s in %s without operator.watchNamespaces", r.GetName(), r.GetNamespace())
		}
	} else {
		// Some namespaces: the ClusterRole holds the generated rules on cluster-scoped resources, the
		// Role in each watched namespace those on namespaced ones; together, exactly the generated rules.
		scope := resourceScopes(t)
		cluster := &rbacv1.ClusterRole{}
		fromUnstructured(t, o, cluster)
		// The one namespaced rule the ClusterRole may hold: reading WorkerClasses anywhere, for the
		// custom-metrics API, which answers for other releases' classes from their status.
		readClasses := rbacv1.PolicyRule{APIGroups: []string{"scheduling.conveyor.dev"}, Resources: []string{"workerclasses"}, Verbs: []string{"get", "list"}}
		cluster.Rules = slices.DeleteFunc(cluster.Rules, func(r rbacv1.PolicyRule) bool { return reflect.DeepEqual(r, readClasses) })
		clusterGrants := checkScope(t, "ClusterRole "+o.GetName(), cluster.Rules, scope, false)
		wantGrants := grants(want.Rules)
		for _, w := range watched {
			role := findNamespacedObject(objs, "Role", w, fullname+"-operator")
			if role == nil {
				t.Errorf("no Role %s-operator in the watched namespace %s", fullname, w)
				continue
			}
			if findNamespacedObject(objs, "RoleBinding", w, fullname+"-operator") == nil {
				t.Errorf("no RoleBinding %s-operator in the watched namespace %s", fullname, w)
			}
			r := &rbacv1.Role{}
			fromUnstructured(t, role, r)
			got := checkScope(t, "Role "+w+"/"+role.GetName(), r.Rules, scope, true)
			for g := range clusterGrants {
				got[g] = true
			}
			if !reflect.DeepEqual(got, wantGrants) {
				t.Errorf("ClusterRole %s and Role %s/%s together grant\n %v\nwant the generated\n %v", o.GetName(), w, role.GetName(), sortedKeys(got), sortedKeys(wantGrants))
			}
		}
	}

	accounts := map[string]bool{}
	for _, o := range objs {
		if o.GetKind() == "ServiceAccount" {
			accounts[o.GetNamespace()+"/"+o.GetName()] = true
		}
	}
	for _, component := range []string{"operator", "scheduler"} {
		if !accounts[ns+"/"+fullname+"-"+component] {
			t.Errorf("no ServiceAccount %s-%s", fullname, component)
		}
	}
	for _, o := range objs {
		if o.GetKind() != "ClusterRoleBinding" && o.GetKind() != "RoleBinding" {
			continue
		}
		binding := &rbacv1.RoleBinding{}
		fromUnstructured(t, o, binding)
		if len(binding.Subjects) == 0 {
			t.Errorf("%s %s binds no one", o.GetKind(), o.GetName())
		}
		for _, s := range binding.Subjects {
			if s.Kind == "ServiceAccount" && !accounts[s.Namespace+"/"+s.Name] && s.Namespace != "kube-system" {
				t.Errorf("%s %s binds ServiceAccount %s/%s, which the chart does not create", o.GetKind(), o.GetName(), s.Namespace, s.Name)
			}
		}
		if binding.RoleRef.Kind == "ClusterRole" && strings.HasPrefix(binding.RoleRef.Name, fullname) && findObject(objs, "ClusterRole", binding.RoleRef.Name) == nil {
			t.Errorf("%s %s refers to ClusterRole %s, which is not rendered", o.GetKind(), o.GetName(), binding.RoleRef.Name)
		}
		if binding.RoleRef.Kind == "Role" && o.GetNamespace() != "kube-system" && findNamespacedObject(objs, "Role", o.GetNamespace(), binding.RoleRef.Name) == nil {
			t.Errorf("%s %s refers to Role %s, which is not rendered", o.GetKind(), o.GetName(), binding.RoleRef.Name)
		}
	}
}

// checkDeployment: two replicas by default (one when the values say so), the restricted Pod
// Security profile, probes, and a ServiceAccount.
func checkDeployment(t *testing.T, objs []*unstructured.Unstructured, name, ns string) {
	t.Helper()
	d := deployment(t, objs, name)
	if d == nil {
		return
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 1 {
		t.Errorf("Deployment %s: replicas %s", name, deref(d.Spec.Replicas))
	}
	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != name {
		t.Errorf("Deployment %s: serviceAccountName %q, want %q", name, pod.ServiceAccountName, name)
	}
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("Deployment %s: pod securityContext %+v, want runAsNonRoot and the RuntimeDefault seccomp profile", name, psc)
	}
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		t.Errorf("Deployment %s uses host namespaces", name)
	}
	for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("Deployment %s container %s: no securityContext", name, c.Name)
			continue
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("Deployment %s container %s: allowPrivilegeEscalation is not false", name, c.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("Deployment %s container %s: the root filesystem is not read-only", name, c.Name)
		case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
			t.Errorf("Deployment %s container %s: capabilities %+v, want drop [ALL] and nothing added", name, c.Name, sc.Capabilities)
		case sc.Privileged != nil && *sc.Privileged:
			t.Errorf("Deployment %s container %s is privileged", name, c.Name)
		}
		if c.LivenessProbe == nil || c.ReadinessProbe == nil {
			t.Errorf("Deployment %s container %s: liveness or readiness probe missing", name, c.Name)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
			t.Errorf("Deployment %s container %s: no cpu or memory request", name, c.Name)
		}
	}
	expect(t, "Deployment "+name+" namespace", d.Namespace, ns)
}

// checkSchedulerConfig loads the rendered KubeSchedulerConfiguration the way conveyor-scheduler
// does, validates it, and checks leader election, the profile and the plugin's arguments.
func checkSchedulerConfig(t *testing.T, objs []*unstructured.Unstructured, release, ns string, wantArgs schedconfig.WorkerClassCapacityArgs) {
	t.Helper()
	fullname := release
	if !strings.Contains(release, "conveyor") {
		fullname = release + "-conveyor"
	}
	o := findObject(objs, "ConfigMap", fullname+"-scheduler-config")
	if o == nil {
		t.Errorf("no ConfigMap %s-scheduler-config", fullname)
		return
	}
	cm := &corev1.ConfigMap{}
	fromUnstructured(t, o, cm)
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte(cm.Data["config.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := scheduleroptions.LoadConfigFromFile(klog.Background(), file)
	if err != nil {
		t.Fatalf("loading the scheduler configuration: %v", err)
	}
	if err := schedulerconfigvalidation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		t.Errorf("the scheduler configuration is invalid: %v", err)
	}
	le := cfg.LeaderElection
	if !le.LeaderElect || le.ResourceLock != "leases" || le.ResourceNamespace != ns || le.ResourceName != fullname+"-scheduler" {
		t.Errorf("leaderElection = %+v, want a Lease %s/%s-scheduler", le, ns, fullname)
	}
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != schedulingv1alpha1.SchedulerName {
		t.Fatalf("profiles = %+v, want one named %s", cfg.Profiles, schedulingv1alpha1.SchedulerName)
	}
	profile := cfg.Profiles[0]
	var multiPoint []string
	if profile.Plugins != nil {
		for _, p := range profile.Plugins.MultiPoint.Enabled {
			multiPoint = append(multiPoint, p.Name)
		}
	}
	if !slices.Contains(multiPoint, "WorkerClassCapacity") {
		t.Errorf("WorkerClassCapacity is not enabled at multiPoint (enabled: %q)", multiPoint)
	}
	var got *schedconfig.WorkerClassCapacityArgs
	for _, pc := range profile.PluginConfig {
		if pc.Name == "WorkerClassCapacity" {
			args, ok := pc.Args.(*schedconfig.WorkerClassCapacityArgs)
			if !ok {
				t.Fatalf("the plugin's args decoded to %T, want *config.WorkerClassCapacityArgs", pc.Args)
			}
			got = args
		}
	}
	if got == nil {
		t.Fatalf("no pluginConfig for WorkerClassCapacity")
	}
	got.TypeMeta = metav1.TypeMeta{}
	if *got != wantArgs {
		t.Errorf("WorkerClassCapacityArgs = %+v, want %+v", *got, wantArgs)
	}
}

// checkCustomMetrics: with customMetrics on, the APIService points at a Service of the operator
// with the chart's CA and never skips TLS verification, and the HPA controller may read the metric;
// with it off, none of that is rendered and the operator is told not to serve the API.
func checkCustomMetrics(t *testing.T, objs []*unstructured.Unstructured, fullname, ns string, enabled bool) {
	t.Helper()
	api := findObject(objs, "APIService", customMetricsAPIService)
	svc := findObject(objs, "Service", fullname+"-custom-metrics")
	reader := findObject(objs, "ClusterRole", fullname+"-custom-metrics-reader")
	args := containerArgs(t, objs, fullname+"-operator")
	if !enabled {
		if api != nil || svc != nil || reader != nil {
			t.Errorf("customMetrics.enabled=false still renders the APIService (%v), its Service (%v) or the reader role (%v)", api != nil, svc != nil, reader != nil)
		}
		if !slices.Contains(args, "--custom-metrics-port=0") {
			t.Errorf("operator args %q lack --custom-metrics-port=0", args)
		}
		return
	}
	if api == nil || svc == nil || reader == nil {
		t.Fatalf("missing: APIService %v, its Service %v, the reader ClusterRole %v", api != nil, svc != nil, reader != nil)
	}
	for _, want := range []string{"--custom-metrics-port=6443", "--custom-metrics-cert-dir=/etc/conveyor/tls"} {
		if !slices.Contains(args, want) {
			t.Errorf("operator args %q lack %s", args, want)
		}
	}
	spec := api.Object["spec"].(map[string]any)
	if skip, _ := spec["insecureSkipTLSVerify"].(bool); skip {
		t.Errorf("the APIService skips TLS verification")
	}
	expect(t, "APIService group", spec["group"], any("custom.metrics.k8s.io"))
	expect(t, "APIService version", spec["version"], any("v1beta2"))
	ref := spec["service"].(map[string]any)
	expect(t, "APIService service.name", ref["name"], any(svc.GetName()))
	expect(t, "APIService service.namespace", ref["namespace"], any(ns))
	secret := findObject(objs, "Secret", fullname+"-operator-tls")
	if secret == nil {
		t.Fatalf("no Secret %s-operator-tls", fullname)
	}
	caBundle, _ := spec["caBundle"].(string)
	ca, _, _ := unstructured.NestedString(secret.Object, "data", "ca.crt")
	if caBundle == "" || caBundle != ca {
		t.Errorf("the APIService's caBundle is not the Secret's ca.crt")
	}
	service := &corev1.Service{}
	fromUnstructured(t, svc, service)
	if len(service.Spec.Ports) != 1 || service.Spec.Ports[0].Port != int32(ref["port"].(int64)) {
		t.Errorf("Service %s ports %+v do not offer the APIService's port %v", service.Name, service.Spec.Ports, ref["port"])
	}
	if service.Spec.Type != corev1.ServiceTypeExternalName {
		expect(t, "custom-metrics Service selector component", service.Spec.Selector["app.kubernetes.io/component"], "operator")
	}

	role := &rbacv1.ClusterRole{}
	fromUnstructured(t, reader, role)
	wantRules := []rbacv1.PolicyRule{{
		APIGroups: []string{"custom.metrics.k8s.io"},
		Resources: []string{"workerclasses.scheduling.conveyor.dev/workerclass_utilization", "workerclasses.scheduling.conveyor.dev/workerclass_request"},
		Verbs:     []string{"get"},
	}}
	if !reflect.DeepEqual(role.Rules, wantRules) {
		t.Errorf("ClusterRole %s rules = %+v, want %+v", role.Name, role.Rules, wantRules)
	}
	binding := findObject(objs, "ClusterRoleBinding", fullname+"-custom-metrics-reader")
	if binding == nil {
		t.Fatalf("no ClusterRoleBinding %s-custom-metrics-reader", fullname)
	}
	crb := &rbacv1.ClusterRoleBinding{}
	fromUnstructured(t, binding, crb)
	hpa := rbacv1.Subject{Kind: "ServiceAccount", Name: "horizontal-pod-autoscaler", Namespace: "kube-system"}
	if !slices.Contains(crb.Subjects, hpa) {
		t.Errorf("ClusterRoleBinding %s subjects %+v lack the HPA controller's ServiceAccount", crb.Name, crb.Subjects)
	}
	for _, name := range []string{fullname + "-operator-delegator"} {
		if findObject(objs, "ClusterRoleBinding", name) == nil {
			t.Errorf("no ClusterRoleBinding %s (system:auth-delegator)", name)
		}
	}
	auth := findObject(objs, "RoleBinding", fullname+"-auth-reader")
	if auth == nil {
		t.Fatalf("no RoleBinding kube-system/%s-auth-reader", fullname)
	}
	rb := &rbacv1.RoleBinding{}
	fromUnstructured(t, auth, rb)
	if !slices.Contains(rb.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: fullname + "-operator", Namespace: ns}) {
		t.Errorf("RoleBinding %s does not let the operator read extension-apiserver-authentication: %+v", rb.Name, rb.Subjects)
	}
}

// checkServiceMonitor: the ServiceMonitors of the operator and the scheduler each scrape their own
// metrics Service's port over HTTPS and verify the certificate with the chart's CA.
func checkServiceMonitor(t *testing.T, objs []*unstructured.Unstructured, ns string) {
	t.Helper()
	if n := countKind(objs, "ServiceMonitor"); n != 2 {
		t.Errorf("%d ServiceMonitors, want 2 (operator and scheduler)", n)
	}
	for _, component := range []string{"operator", "scheduler"} {
		sm := findObject(objs, "ServiceMonitor", "conveyor-"+component)
		if sm == nil {
			t.Fatalf("metrics.serviceMonitor.enabled=true renders no ServiceMonitor conveyor-%s", component)
		}
		expect(t, "ServiceMonitor apiVersion", sm.GetAPIVersion(), "monitoring.coreos.com/v1")
		selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		svcName := "conveyor-" + component + "-metrics"
		var selected []string
		for _, o := range objs {
			if o.GetKind() != "Service" {
				continue
			}
			matches := true
			for k, v := range selector {
				matches = matches && o.GetLabels()[k] == v
			}
			if matches {
				selected = append(selected, o.GetName())
			}
		}
		if !slices.Equal(selected, []string{svcName}) {
			t.Errorf("ServiceMonitor %s selects the Services %v, want only %s", sm.GetName(), selected, svcName)
		}
		endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		if len(endpoints) != 1 {
			t.Fatalf("ServiceMonitor %s endpoints = %v, want one", sm.GetName(), endpoints)
		}
		ep := endpoints[0].(map[string]any)
		expect(t, "endpoint port", ep["port"], any("https-metrics"))
		expect(t, "endpoint scheme", ep["scheme"], any("https"))
		expect(t, "endpoint interval", ep["interval"], any("30s"))
		caSecret, _, _ := unstructured.NestedString(ep, "tlsConfig", "ca", "secret", "name")
		expect(t, "endpoint tlsConfig.ca.secret.name", caSecret, "conveyor-operator-tls")
		serverName, _, _ := unstructured.NestedString(ep, "tlsConfig", "serverName")
		expect(t, "endpoint tlsConfig.serverName", serverName, svcName+"."+ns+".svc")
		if skip, _, _ := unstructured.NestedBool(ep, "tlsConfig", "insecureSkipVerify"); skip {
			t.Errorf("ServiceMonitor %s skips TLS verification", sm.GetName())
		}
		svc := &corev1.Service{}
		fromUnstructured(t, findObject(objs, "Service", svcName), svc)
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "https-metrics" {
			t.Errorf("Service %s ports %+v, want one named https-metrics", svcName, svc.Spec.Ports)
		}
	}
}

// checkServingCertificate: the Secret's certificate is signed by its CA and valid for the DNS
// names of both operator Services and of the scheduler's metrics Service (the scheduler serves it
// too), as the aggregator and Prometheus verify them.
func checkServingCertificate(t *testing.T, objs []*unstructured.Unstructured, fullname, ns string) {
	t.Helper()
	o := findObject(objs, "Secret", fullname+"-operator-tls")
	if o == nil {
		t.Errorf("no Secret %s-operator-tls", fullname)
		return
	}
	secret := &corev1.Secret{}
	fromUnstructured(t, o, secret)
	expect(t, "Secret type", secret.Type, corev1.SecretTypeTLS)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(secret.Data["ca.crt"]) {
		t.Fatalf("ca.crt holds no PEM certificate")
	}
	block, _ := pem.Decode(secret.Data["tls.crt"])
	if block == nil {
		t.Fatalf("tls.crt holds no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("parsing tls.crt: %v", err)
	}
	if key, _ := pem.Decode(secret.Data["tls.key"]); key == nil || !strings.Contains(key.Type, "PRIVATE KEY") {
		t.Errorf("tls.key holds no PEM private key")
	}
	for _, svc := range []string{fullname + "-custom-metrics", fullname + "-operator-metrics", fullname + "-scheduler-metrics"} {
		name := svc + "." + ns + ".svc"
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: pool}); err != nil {
			t.Errorf("the serving certificate does not verify for %s: %v", name, err)
		}
	}
}

// apiServiceCABundle reads the caBundle of the custom-metrics APIService from the cluster.
func apiServiceCABundle(ctx context.Context, t *testing.T) []byte {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apiregistration.k8s.io/v1")
	u.SetKind("APIService")
	if err := env.Client().Get(ctx, client.ObjectKey{Name: customMetricsAPIService}, u); err != nil {
		t.Fatalf("reading APIService %s: %v", customMetricsAPIService, err)
	}
	b64, _, _ := unstructured.NestedString(u.Object, "spec", "caBundle")
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(data) == 0 {
		t.Fatalf("APIService %s: caBundle %q: %v", customMetricsAPIService, b64, err)
	}
	return data
}

// waitDeploymentAvailable waits until the Deployment has the given number of available replicas.
func waitDeploymentAvailable(ctx context.Context, t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	testenv.EventuallyContext(ctx, t, "Deployment "+name+" available", func(ctx context.Context) error {
		d := &appsv1.Deployment{}
		if err := env.Client().Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
			return err
		}
		if d.Status.ObservedGeneration < d.Generation || d.Status.AvailableReplicas != replicas || d.Status.UpdatedReplicas != replicas {
			return fmt.Errorf("Deployment %s: generation %d observed %d, %d updated, %d available, want %d",
				name, d.Generation, d.Status.ObservedGeneration, d.Status.UpdatedReplicas, d.Status.AvailableReplicas, replicas)
		}
		return nil
	})
}

// labelledObjects lists, over every resource the API server serves (CRDs excepted), the objects
// matching selector, as "Kind namespace/name" (or "Kind name").
func labelledObjects(ctx context.Context, t *testing.T, selector string) []string {
	t.Helper()
	lists, err := env.Clientset().Discovery().ServerPreferredResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		t.Fatalf("discovery: %v", err)
	}
	dyn, err := dynamic.NewForConfig(env.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			if gv.Group == "apiextensions.k8s.io" && r.Name == "customresourcedefinitions" {
				continue
			}
			items, err := dyn.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{LabelSelector: selector})
			if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
				continue
			}
			if err != nil {
				t.Fatalf("listing %s: %v", gv.WithResource(r.Name), err)
			}
			for _, item := range items.Items {
				name := item.GetName()
				if ns := item.GetNamespace(); ns != "" {
					name = ns + "/" + name
				}
				found = append(found, r.Kind+" "+name)
			}
		}
	}
	sort.Strings(found)
	return found
}

func findObject(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			return o
		}
	}
	return nil
}

func findNamespacedObject(objs []*unstructured.Unstructured, kind, ns, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetNamespace() == ns && o.GetName() == name {
			return o
		}
	}
	return nil
}

// watchedNamespaces is what the operator's ClusterRole records in conveyor.dev/watch-namespaces
// (operator.watchNamespaces): none for every namespace.
func watchedNamespaces(objs []*unstructured.Unstructured, fullname string) []string {
	o := findObject(objs, "ClusterRole", fullname+"-operator")
	if o == nil {
		return nil
	}
	v := o.GetAnnotations()["conveyor.dev/watch-namespaces"]
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// resourceScopes maps "<group>/<resource>" to whether the local API server serves it namespaced.
func resourceScopes(t *testing.T) map[string]bool {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(env.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	// A group whose aggregated API is down (custom metrics without its server) is only missing.
	_, lists, err := dc.ServerGroupsAndResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		t.Fatalf("discovery: %v", err)
	}
	scope := map[string]bool{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			scope[gv.Group+"/"+r.Name] = r.Namespaced
		}
	}
	return scope
}

// grants expands rules into "<group>/<resource>:<verb>" entries.
func grants(rules []rbacv1.PolicyRule) map[string]bool {
	out := map[string]bool{}
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out[g+"/"+res+":"+v] = true
				}
			}
		}
	}
	return out
}

// checkScope fails on any rule of what on a resource (or subresource of one) that is not of the
// wanted scope, or that the API server does not serve, and returns the rules' grants.
func checkScope(t *testing.T, what string, rules []rbacv1.PolicyRule, scope map[string]bool, namespaced bool) map[string]bool {
	t.Helper()
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				base, _, _ := strings.Cut(res, "/")
				isNamespaced, known := scope[g+"/"+base]
				switch {
				case !known:
					t.Errorf("%s: the API server serves no resource %s in group %q", what, base, g)
				case isNamespaced != namespaced:
					t.Errorf("%s: a rule on %s/%s, which is namespaced=%v", what, g, res, isNamespaced)
				}
			}
		}
	}
	return grants(rules)
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func countKind(objs []*unstructured.Unstructured, kind string) int {
	n := 0
	for _, o := range objs {
		if o.GetKind() == kind {
			n++
		}
	}
	return n
}

func fromUnstructured(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
		t.Fatalf("converting %s %s to %T: %v", o.GetKind(), o.GetName(), into, err)
	}
}

func deployment(t *testing.T, objs []*unstructured.Unstructured, name string) *appsv1.Deployment {
	t.Helper()
	o := findObject(objs, "Deployment", name)
	if o == nil {
		t.Errorf("no Deployment %s", name)
		return nil
	}
	d := &appsv1.Deployment{}
	fromUnstructured(t, o, d)
	return d
}

// containerArgs returns the args of the Deployment's first container.
func containerArgs(t *testing.T, objs []*unstructured.Unstructured, name string) []string {
	t.Helper()
	d := deployment(t, objs, name)
	if d == nil || len(d.Spec.Template.Spec.Containers) == 0 {
		return nil
	}
	return d.Spec.Template.Spec.Containers[0].Args
}

// TestChartWatchNamespacesRBAC installs the chart with operator.watchNamespaces and acts with a
// token of the operator's ServiceAccount: it may create Pods, ConfigMaps and Services in the
// watched namespace and nothing of that anywhere else, and reads Pods only where it watches.
func TestChartWatchNamespacesRBAC(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), chartTestTimeout)
	defer cancel()
	h := newHelm(t)
	system := testenv.NewNamespace(t, env.Client(), "rbac-system", testenv.DeleteAfterTest())
	watched := testenv.NewNamespace(t, env.Client(), "rbac-watched", testenv.DeleteAfterTest())
	other := testenv.NewNamespace(t, env.Client(), "rbac-other", testenv.DeleteAfterTest())
	const release = "conveyor-rbac"
	installed := false
	t.Cleanup(func() {
		if installed {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, _ = h.run(ctx, "uninstall", release, "--namespace", system, "--ignore-not-found", "--wait", "--timeout", "90s")
		}
	})
	installed = true
	// No APIService: nothing serves it here, and one left unavailable would slow discovery.
	if out, err := h.run(ctx, "install", release, chartDir(), "--namespace", system, "--skip-crds",
		"--set", "customMetrics.enabled=false", "--set", "operator.replicas=1", "--set", "scheduler.replicas=1",
		"--set", "operator.watchNamespaces={"+watched+"}"); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", serviceAccountKubeconfig(ctx, t, system, release+"-operator"))
	if err != nil {
		t.Fatal(err)
	}
	op, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	objects := func(ns string) []client.Object {
		return []client.Object{
			&corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "worker"},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/none:v1"}}},
			},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "routes"}},
			&corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stage"},
				Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Port: 80}}},
			},
		}
	}
	// A dry run is authorized like a real request, and leaves nothing behind.
	for _, o := range objects(watched) {
		if err := op.Create(ctx, o, client.DryRunAll); err != nil {
			t.Errorf("as the operator, creating %T %s in the watched namespace %s: %v, want it allowed", o, o.GetName(), watched, err)
		}
	}
	for _, ns := range []string{other, system} {
		for _, o := range objects(ns) {
			if err := op.Create(ctx, o, client.DryRunAll); !apierrors.IsForbidden(err) {
				t.Errorf("as the operator, creating %T %s in namespace %s, which it does not watch: %v, want Forbidden", o, o.GetName(), ns, err)
			}
		}
	}
	if err := op.List(ctx, &corev1.PodList{}, client.InNamespace(watched)); err != nil {
		t.Errorf("as the operator, listing Pods in %s: %v", watched, err)
	}
	for _, ns := range []string{other, ""} {
		if err := op.List(ctx, &corev1.PodList{}, client.InNamespace(ns)); !apierrors.IsForbidden(err) {
			t.Errorf("as the operator, listing Pods in %q: %v, want Forbidden", ns, err)
		}
	}
	// The cluster-scoped read it keeps: StorageClasses (whether a claim can grow).
	if err := op.List(ctx, &storagev1.StorageClassList{}); err != nil {
		t.Errorf("as the operator, listing StorageClasses: %v", err)
	}
}

// TestChartOneOperatorPerNamespace: a release whose operator would reconcile a namespace another
// release's operator already watches (or every namespace, or one that watches every namespace) is
// refused at install; a release on other namespaces is not, nor an upgrade of the release itself.
// `lookup` sees the cluster in install, upgrade and --dry-run=server, not in helm template.
func TestChartOneOperatorPerNamespace(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), chartTestTimeout)
	defer cancel()
	h := newHelm(t)
	systemA := testenv.NewNamespace(t, env.Client(), "one-a", testenv.DeleteAfterTest())
	systemB := testenv.NewNamespace(t, env.Client(), "one-b", testenv.DeleteAfterTest())
	w1 := testenv.NewNamespace(t, env.Client(), "one-w1", testenv.DeleteAfterTest())
	w2 := testenv.NewNamespace(t, env.Client(), "one-w2", testenv.DeleteAfterTest())
	const first, second = "conveyor-one-a", "conveyor-one-b"
	installed := false
	t.Cleanup(func() {
		if installed {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, _ = h.run(ctx, "uninstall", first, "--namespace", systemA, "--ignore-not-found", "--wait", "--timeout", "90s")
		}
	})
	common := []string{"--skip-crds", "--set", "customMetrics.enabled=false", "--set", "operator.replicas=1", "--set", "scheduler.replicas=1"}
	installed = true
	if out, err := h.run(ctx, append([]string{"install", first, chartDir(), "--namespace", systemA, "--set", "operator.watchNamespaces={" + w1 + "}"}, common...)...); err != nil {
		t.Fatalf("helm install %s: %v\n%s", first, err, out)
	}

	for _, tc := range []struct {
		watch   string
		refused bool
	}{
		{"{" + w1 + "}", true},
		{"{" + w2 + "," + w1 + "}", true},
		{"", true}, // the default: every namespace
		{"{" + w2 + "}", false},
	} {
		t.Run("watchNamespaces="+cmp.Or(tc.watch, "default"), func(t *testing.T) {
			args := append([]string{"install", second, chartDir(), "--namespace", systemB, "--dry-run=server"}, common...)
			if tc.watch != "" {
				args = append(args, "--set", "operator.watchNamespaces="+tc.watch)
			}
			out, err := h.run(ctx, args...)
			switch {
			case tc.refused && err == nil:
				t.Errorf("a second release watching %s beside %s (watching %s) was accepted", tc.watch, first, w1)
			case tc.refused && !strings.Contains(err.Error(), "another Conveyor operator is installed") || tc.refused && !strings.Contains(err.Error(), first):
				t.Errorf("the refusal does not say why, or does not name %s: %v", first, err)
			case !tc.refused && err != nil:
				t.Errorf("a second release on other namespaces was refused: %v\n%s", err, out)
			}
		})
	}
	// The release itself is not in its own way, and may move to another namespace.
	if out, err := h.run(ctx, "upgrade", first, chartDir(), "--namespace", systemA, "--reuse-values", "--dry-run=server",
		"--set", "operator.watchNamespaces={"+w1+","+w2+"}"); err != nil {
		t.Errorf("helm upgrade %s --dry-run=server: %v\n%s", first, err, out)
	}
}
