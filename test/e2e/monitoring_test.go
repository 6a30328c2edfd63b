package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/conveyor-dev/conveyor/test/testenv"
)

// The alerts of the chart's PrometheusRule (templates/prometheusrule.yaml).
var chartAlerts = []string{
	"ConveyorPipelineBroken", "ConveyorPipelinePendingForCapacity", "ConveyorPipelinePlacementFailed",
	"ConveyorPipelineReconcileErrors", "ConveyorWorkerClassBeyondMaxReplicas", "ConveyorSchedulerErrors",
	"ConveyorOperatorNoLeader", "ConveyorSchedulerNoLeader",
}

// TestChartMonitoring: helm template renders the Grafana dashboard's ConfigMap and the
// PrometheusRule only when they are enabled, the ConfigMap with the sidecar's label and a dashboard
// Grafana can load, the rule with every alert; the API server accepts the ConfigMap.
func TestChartMonitoring(t *testing.T) {
	ctx := testContext(t)
	h := newHelm(t)
	ns := testenv.NewNamespace(t, env.Client(), "", testenv.DeleteAfterTest())
	dashboards := testenv.NewNamespace(t, env.Client(), "grafana", testenv.DeleteAfterTest())

	t.Run("off by default", func(t *testing.T) {
		objs := renderChart(ctx, t, h, "conveyor", ns)
		if o := findObject(objs, "ConfigMap", "conveyor-dashboard"); o != nil {
			t.Errorf("the dashboard ConfigMap is rendered by default")
		}
		if n := countKind(objs, "PrometheusRule"); n != 0 {
			t.Errorf("%d PrometheusRules rendered by default", n)
		}
		for _, o := range objs {
			if _, ok := o.GetLabels()["grafana_dashboard"]; ok {
				t.Errorf("%s %s carries grafana_dashboard by default", o.GetKind(), o.GetName())
			}
		}
	})

	t.Run("enabled", func(t *testing.T) {
		objs := renderChart(ctx, t, h, "conveyor", ns, "monitoring.dashboard.enabled=true", "monitoring.prometheusRule.enabled=true",
			"monitoring.prometheusRule.labels.release=kube-prometheus-stack")
		checkChartObjects(t, objs, "conveyor", ns)
		cm := findObject(objs, "ConfigMap", "conveyor-dashboard")
		if cm == nil {
			t.Fatal("monitoring.dashboard.enabled=true renders no ConfigMap conveyor-dashboard")
		}
		expect(t, "dashboard label grafana_dashboard", cm.GetLabels()["grafana_dashboard"], "1")
		checkDashboard(t, cm)
		rule := findObject(objs, "PrometheusRule", "conveyor")
		if rule == nil {
			t.Fatal("monitoring.prometheusRule.enabled=true renders no PrometheusRule conveyor")
		}
		expect(t, "PrometheusRule apiVersion", rule.GetAPIVersion(), "monitoring.coreos.com/v1")
		expect(t, "PrometheusRule label release", rule.GetLabels()["release"], "kube-prometheus-stack")
		got := map[string]bool{}
		for _, r := range ruleList(t, rule) {
			name, _ := r["alert"].(string)
			got[name] = true
			labels, _ := r["labels"].(map[string]any)
			annotations, _ := r["annotations"].(map[string]any)
			if labels["severity"] == nil || annotations["summary"] == nil || annotations["description"] == nil || r["for"] == nil {
				t.Errorf("alert %s lacks a severity, summary, description or for: %v", name, r)
			}
			if expr, _ := r["expr"].(string); len(promqlMetricNames(expr)) == 0 {
				t.Errorf("alert %s: no metric in %q", name, expr)
			}
		}
		if want := chartAlerts; !slices.Equal(sortedKeys(got), slices.Sorted(slices.Values(want))) {
			t.Errorf("alerts %v, want %v", sortedKeys(got), slices.Sorted(slices.Values(want)))
		}
		// The monitoring.coreos.com CRDs are not installed in the local cluster.
		serverDryRun(ctx, t, []*unstructured.Unstructured{cm})
	})

	t.Run("dashboard in Grafana's namespace, with a folder", func(t *testing.T) {
		objs := renderChart(ctx, t, h, "conveyor", ns, "monitoring.dashboard.enabled=true", "monitoring.dashboard.namespace="+dashboards,
			"monitoring.dashboard.annotations.grafana_folder=Conveyor", "monitoring.dashboard.labels.team=data")
		cm := findNamespacedObject(objs, "ConfigMap", dashboards, "conveyor-dashboard")
		if cm == nil {
			t.Fatalf("no ConfigMap conveyor-dashboard in namespace %s", dashboards)
		}
		expect(t, "dashboard annotation grafana_folder", cm.GetAnnotations()["grafana_folder"], "Conveyor")
		expect(t, "dashboard label team", cm.GetLabels()["team"], "data")
		expect(t, "dashboard label grafana_dashboard", cm.GetLabels()["grafana_dashboard"], "1")
		if n := countKind(objs, "PrometheusRule"); n != 0 {
			t.Errorf("%d PrometheusRules with only the dashboard enabled", n)
		}
		serverDryRun(ctx, t, []*unstructured.Unstructured{cm})
	})
}

// checkDashboard: the ConfigMap holds one dashboard, conveyor.json, whose every panel has queries
// on a Prometheus data source chosen by the variable, and whose every query names a metric.
func checkDashboard(t *testing.T, cm *unstructured.Unstructured) {
	t.Helper()
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	if len(data) != 1 || data["conveyor.json"] == "" {
		t.Fatalf("dashboard ConfigMap data keys %v, want conveyor.json", sortedKeys(mapKeys(data)))
	}
	d := dashboard{}
	if err := json.Unmarshal([]byte(data["conveyor.json"]), &d); err != nil {
		t.Fatalf("conveyor.json: %v", err)
	}
	expect(t, "dashboard uid", d.UID, "conveyor")
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	for _, v := range []string{"datasource", "system_namespace", "namespace", "workerclass"} {
		if !vars[v] {
			t.Errorf("dashboard has no variable %s", v)
		}
	}
	queries := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 || p.Title == "" || p.Description == "" {
			t.Errorf("panel %q: data source %q, %d queries, description %q", p.Title, p.Datasource.UID, len(p.Targets), p.Description)
		}
		for _, q := range p.Targets {
			queries++
			if len(promqlMetricNames(q.Expr)) == 0 {
				t.Errorf("panel %q: no metric in %q", p.Title, q.Expr)
			}
		}
	}
	if queries < 10 {
		t.Errorf("%d queries in the dashboard, want at least 10", queries)
	}
}

// dashboard is what the tests read of a Grafana dashboard.
type dashboard struct {
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Type        string `json:"type"`
		Title       string `json:"title"`
		Description string `json:"description"`
		Datasource  struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// ruleList flattens the rules of a PrometheusRule's groups.
func ruleList(t *testing.T, rule *unstructured.Unstructured) []map[string]any {
	t.Helper()
	groups, _, err := unstructured.NestedSlice(rule.Object, "spec", "groups")
	if err != nil || len(groups) == 0 {
		t.Fatalf("PrometheusRule %s: no spec.groups (%v)", rule.GetName(), err)
	}
	var out []map[string]any
	for _, g := range groups {
		rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, r := range rules {
			out = append(out, r.(map[string]any))
		}
	}
	return out
}

// TestChartAlertRules tests the chart's alerts as Prometheus users do: the PrometheusRule rendered
// by helm template, as a rules file, goes through promtool check rules and promtool test rules with
// the test series of testdata/conveyor-alerts.test.yaml, which must fire every alert at least once.
func TestChartAlertRules(t *testing.T) {
	ctx := testContext(t)
	h := newHelm(t)
	promtool := filepath.Join(env.BinDir(), "promtool")
	if _, err := os.Stat(promtool); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool is missing from %s: %v", env.BinDir(), err)
		}
		t.Skipf("promtool is missing from %s (make tools builds it): %v", env.BinDir(), err)
	}
	objs := renderChart(ctx, t, h, "conveyor", "conveyor-system", "monitoring.prometheusRule.enabled=true")
	rule := findObject(objs, "PrometheusRule", "conveyor")
	if rule == nil {
		t.Fatal("no PrometheusRule conveyor")
	}
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	rules, err := sigsyaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tests, err := os.ReadFile(filepath.Join("testdata", "conveyor-alerts.test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"rules.yaml": rules, "conveyor-alerts.test.yaml": tests} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// Every alert has a test in which it fires.
	var unitTests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := sigsyaml.Unmarshal(tests, &unitTests); err != nil {
		t.Fatal(err)
	}
	fires := map[string]bool{}
	for _, tc := range unitTests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	for _, a := range chartAlerts {
		if !fires[a] {
			t.Errorf("testdata/conveyor-alerts.test.yaml fires no %s", a)
		}
	}

	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "conveyor-alerts.test.yaml"}} {
		cmd := exec.CommandContext(ctx, promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			continue
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// promqlKeywords are the words of PromQL that are not metric names where an identifier stands:
// aggregation operators, their modifiers, set and vector-matching operators, and literals.
var promqlKeywords = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true, "count": true,
	"count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true,
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true,
}

// promqlListModifiers are followed by a parenthesised list of label names.
var promqlListModifiers = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// promqlMetricNames returns the metric names an expression selects: the identifiers that are not
// functions (followed by a parenthesis), keywords, label names in matchers or grouping lists,
// strings, durations or Grafana variables.
func promqlMetricNames(expr string) []string {
	var names []string
	isStart := func(c byte) bool { return c == '_' || c == ':' || (c|0x20 >= 'a' && c|0x20 <= 'z') }
	isPart := func(c byte) bool { return isStart(c) || (c >= '0' && c <= '9') }
	skipTo := func(i int, closing byte) int { // i is at the opening character; returns the index after closing
		for i++; i < len(expr) && expr[i] != closing; i++ {
			if q := expr[i]; q == '"' || q == '\'' || q == '`' {
				for i++; i < len(expr) && expr[i] != q; i++ {
					if expr[i] == '\\' {
						i++
					}
				}
			}
		}
		return i + 1
	}
	skipWhile := func(i int, in func(byte) bool) int {
		for i < len(expr) && in(expr[i]) {
			i++
		}
		return i
	}
	nextNonSpace := func(i int) int {
		for i < len(expr) && (expr[i] == ' ' || expr[i] == '\n' || expr[i] == '\t') {
			i++
		}
		return i
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipTo(i, c)
		case c == '{':
			i = skipTo(i, '}')
		case c == '[':
			i = skipTo(i, ']')
		case c == '$': // a Grafana variable
			i = skipWhile(i+1, func(b byte) bool { return isPart(b) || b == '{' || b == '}' })
		case c >= '0' && c <= '9': // a number or a duration
			i = skipWhile(i+1, func(b byte) bool { return isPart(b) || b == '.' })
		case isStart(c):
			j := i + 1
			for j < len(expr) && isPart(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := nextNonSpace(j)
			switch {
			case promqlListModifiers[word]:
				if k < len(expr) && expr[k] == '(' {
					j = skipTo(k, ')')
				}
			case promqlKeywords[word]:
			case k < len(expr) && expr[k] == '(': // a function
			default:
				names = append(names, word)
			}
			i = j
		default:
			i++
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func TestPromQLMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`max by (pipeline_namespace) (conveyor_pipelines{phase="Broken"}) > 0`, []string{"conveyor_pipelines"}},
		{`sum by (namespace, controller) (rate(controller_runtime_reconcile_errors_total{namespace="x", controller=~"a|b"}[5m])) > 0`, []string{"controller_runtime_reconcile_errors_total"}},
		{"sum by (namespace, name) (leader_election_master_status{name=\"a\"}) < 1\n  or absent(leader_election_master_status{name=\"a\"})", []string{"leader_election_master_status"}},
		{`100 * max by (a) (x_requested{ns=~"$namespace"}) / max by (a) (x_capacity{b="}{"} > 0)`, []string{"x_capacity", "x_requested"}},
		{`sum by (result) (rate(scheduler_schedule_attempts_total{profile="p"}[$__rate_interval]))`, []string{"scheduler_schedule_attempts_total"}},
		{`a / on (x) group_left (y) b unless c offset 5m and bool d`, []string{"a", "b", "c", "d"}},
		{`topk(3, metric_a) + 1.5e3 + inf`, []string{"metric_a"}},
	} {
		if got := promqlMetricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("promqlMetricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

// monitoredMetricNames renders the chart's dashboard and rules and returns every metric name their
// queries use: the panels', the template variables' (label_values(metric..., label)) and the alerts'.
func monitoredMetricNames(ctx context.Context, t *testing.T, h *helmCLI, ns string) []string {
	t.Helper()
	objs := renderChart(ctx, t, h, "conveyor", ns, "monitoring.dashboard.enabled=true", "monitoring.prometheusRule.enabled=true")
	var names []string
	cm := findObject(objs, "ConfigMap", "conveyor-dashboard")
	rule := findObject(objs, "PrometheusRule", "conveyor")
	if cm == nil || rule == nil {
		t.Fatal("the chart renders no dashboard ConfigMap or no PrometheusRule")
	}
	raw, _, _ := unstructured.NestedString(cm.Object, "data", "conveyor.json")
	d := dashboard{}
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		t.Fatal(err)
	}
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			names = append(names, promqlMetricNames(q.Expr)...)
		}
	}
	for _, v := range d.Templating.List {
		q, ok := v.Query.(map[string]any)
		if !ok {
			continue
		}
		s, _ := q["query"].(string)
		if args, ok := strings.CutPrefix(s, "label_values("); ok {
			if i := strings.LastIndex(args, ","); i > 0 {
				names = append(names, promqlMetricNames(args[:i])...)
			}
		}
	}
	for _, r := range ruleList(t, rule) {
		expr, _ := r["expr"].(string)
		names = append(names, promqlMetricNames(expr)...)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// scrapeMetricNames reads a /metrics endpoint with a bearer token and returns the names of the
// metric families it serves (its # TYPE lines).
func scrapeMetricNames(ctx context.Context, url, token string, tlsConfig *tls.Config) (map[string]bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}, Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
		}
	}
	return names, sc.Err()
}

func mapKeys[V any](m map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}
